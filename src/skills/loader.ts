import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { DomainError } from '../domain/errors.js';
import { parseFrontMatter, splitFrontMatter } from './front-matter.js';

/**
 * Skills: `SKILL.md` files with YAML front matter (`name`, `version`, `description`,
 * `allowed-tools`, optional `model`) whose body is the system prompt. Roots, later ones
 * overriding earlier ones by name: the bundled `skills/`, `$BEIDOU_HOME/skills`, then each
 * root in `BEIDOU_SKILLS`. A root holds `<folder>/SKILL.md` (or `SKILL.md` itself).
 *
 * `has()` is the cheap existence check (declare time); `load()` is the full load (spawn
 * time). Both read the disk, so a skill edited while the server runs is picked up.
 */

const frontMatterSchema = z.object({
  name: z.string().min(1),
  version: z.union([z.string(), z.number()]).transform(String).optional(),
  description: z.string().min(1),
  'allowed-tools': z
    .union([z.array(z.string()), z.string()])
    .transform((v) => (Array.isArray(v) ? v : v.split(/[\s,]+/).filter(Boolean)))
    .optional(),
  model: z.string().optional(),
});

export interface Skill {
  name: string;
  version: string | null;
  description: string;
  allowedTools: string[];
  model: string | null;
  body: string;
  path: string;
}

export class SkillLoadError extends Error {
  constructor(
    readonly skillPath: string,
    reason: string,
  ) {
    super(`${skillPath}: ${reason}`);
  }
}

export function parseSkillFile(file: string): Skill {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new SkillLoadError(file, `cannot read (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  let parsed: { data: unknown; content: string };
  try {
    const split = splitFrontMatter(text);
    if (!split) throw new SkillLoadError(file, 'missing YAML front matter (--- ... ---)');
    parsed = { data: parseFrontMatter(split.matter), content: split.body };
  } catch (err) {
    if (err instanceof SkillLoadError) throw err;
    throw new SkillLoadError(file, `front matter is not valid YAML: ${(err as Error).message.split('\n')[0]}`);
  }
  const fm = frontMatterSchema.safeParse(parsed.data);
  if (!fm.success) {
    const issue = fm.error.issues[0]!;
    throw new SkillLoadError(file, `front matter field "${issue.path.join('.') || '?'}": ${issue.message}`);
  }
  const body = parsed.content.trim();
  if (body.length === 0) throw new SkillLoadError(file, 'the body (the system prompt) is empty');
  return {
    name: fm.data.name,
    version: fm.data.version ?? null,
    description: fm.data.description,
    allowedTools: fm.data['allowed-tools'] ?? [],
    model: fm.data.model ?? null,
    body,
    path: file,
  };
}

export class SkillCatalog {
  constructor(private readonly roots: readonly string[]) {}

  /** Where each skill name resolves: later roots win. Unreadable roots are skipped. */
  private index(): Map<string, string> {
    const found = new Map<string, string>();
    for (const root of this.roots) {
      if (!existsSync(root)) continue;
      const direct = path.join(root, 'SKILL.md');
      if (existsSync(direct)) found.set(path.basename(root), direct);
      let entries: string[];
      try {
        entries = readdirSync(root);
      } catch {
        continue;
      }
      for (const entry of entries) {
        const file = path.join(root, entry, 'SKILL.md');
        if (existsSync(file) && statSync(file).isFile()) found.set(entry, file);
      }
    }
    return found;
  }

  /** Skill names resolve by folder name; the front matter `name` must agree (checked on load). */
  has(name: string): boolean {
    return this.index().has(name);
  }

  names(): string[] {
    return [...this.index().keys()].sort();
  }

  load(name: string): Skill {
    const file = this.index().get(name);
    if (!file) throw new SkillLoadError(name, 'no SKILL.md with this name in any skills root');
    const skill = parseSkillFile(file);
    if (skill.name !== name) {
      throw new SkillLoadError(file, `front matter name "${skill.name}" does not match its folder "${name}"`);
    }
    return skill;
  }

  /**
   * A skill a caller named (a tool input, an API body, a plan task): loaded, or refused as
   * `unknown_skill` with why it did not load and what exists. `field` is the input field
   * that named it (none for a plan task's skill); `message` overrides the default wording.
   */
  require(
    name: string,
    field: string | null,
    message = `${field ?? 'skill'} "${name}" does not resolve to a loadable SKILL.md`,
  ): Skill {
    try {
      return this.load(name);
    } catch (err) {
      const reason = err instanceof SkillLoadError ? err.message : String(err);
      throw new DomainError('unknown_skill', message, {
        ...(field ? { field } : {}),
        skill: name,
        reason,
        available: this.names(),
      });
    }
  }

  /** Loads every skill, collecting errors instead of stopping at the first (for start-up checks). */
  loadAll(): { skills: Skill[]; errors: SkillLoadError[] } {
    const skills: Skill[] = [];
    const errors: SkillLoadError[] = [];
    for (const name of this.names()) {
      try {
        skills.push(this.load(name));
      } catch (err) {
        errors.push(err as SkillLoadError);
      }
    }
    return { skills, errors };
  }
}
