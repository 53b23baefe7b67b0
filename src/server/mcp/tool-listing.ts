import { z } from 'zod';
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import type { AnyPrimitive } from '../../primitives/define.js';

/** JSON Schema of a primitive's input (as a client sends it) or output (as it receives it). */
export function toolJsonSchema(schema: z.ZodType, io: 'input' | 'output'): Record<string, unknown> {
  const json = z.toJSONSchema(schema, { io, target: 'draft-2020-12' }) as Record<string, unknown>;
  delete json.$schema;
  return json;
}

export function toolDefinition(p: AnyPrimitive): Tool {
  return {
    name: p.name,
    title: p.title,
    description: p.description,
    inputSchema: toolJsonSchema(p.inputSchema, 'input') as Tool['inputSchema'],
    outputSchema: toolJsonSchema(p.outputSchema, 'output') as Tool['outputSchema'],
    ...(p.annotations ? { annotations: { title: p.title, ...p.annotations } } : {}),
  };
}
