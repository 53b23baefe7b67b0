import { afterAll } from 'vitest';
import { dropCreatedDatabases } from './store.js';

// A setupFile of the postgres projects: each test file's databases go when the file ends
// (the servers it started are closed by then; any left over are disconnected).
afterAll(dropCreatedDatabases);
