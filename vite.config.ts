import { defineConfig } from 'vite';

/**
 * The dashboard build (`npm run build`): web/ → dist/web/, served by src/server/http/dashboard.ts.
 * Preact's automatic JSX runtime through Vite's own transform (no preset plugin needed);
 * hashed asset names, so the server can cache them for good.
 */
export default defineConfig({
  root: 'web',
  base: '/',
  publicDir: 'public',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: '../dist/web',
    emptyOutDir: true,
    assetsDir: 'assets',
    target: 'es2022',
    sourcemap: false,
    reportCompressedSize: false,
  },
  logLevel: 'warn',
});
