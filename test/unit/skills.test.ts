import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { readSimple, splitFrontMatter } from '../../src/skills/front-matter.js';
import { SkillCatalog, SkillLoadError } from '../../src/skills/loader.js';
import { assemblePrompt, firstMessage } from '../../src/domain/prompt.js';
import { PACKAGE_ROOT } from '../../src/util/version.js';
import { removeHome, tempHome } from '../support/server.js';

const YAML = createRequire(import.meta.url)('yaml') as typeof import('yaml');

/** Front matter lines built from pieces YAML gives meanings to: indicators, comments, quotes, typed words, odd spaces. */
const trickyLine = fc
  .tuple(
    fc.constantFrom(
      'name',
      'description',
      'version',
      'model',
      'allowed-tools',
      'true',
      'null',
      'a_b',
      ' indented',
      '- item',
      '#c',
      '<<',
    ),
    fc.constantFrom(': ', ':', ':  ', ' : '),
    fc.oneof(
      fc.constantFrom(
        'worker',
        '1',
        '01',
        '1.0',
        '-1',
        '0x1f',
        '.inf',
        'NaN',
        'true',
        'No',
        '~',
        'null',
        '',
        ' ',
        'a: b',
        'a:b',
        'a #c',
        'a#c',
        "it's",
        '"q"',
        "'q'",
      ),
      fc.constantFrom(
        '[Read, Grep]',
        '[]',
        '[ a , b ]',
        '[a,]',
        '[a, [b]]',
        '[true, x]',
        '[1, x]',
        '[a] # c',
        '{a: b}',
        '&x a',
        '*x',
        '!t a',
        '|',
        '> a',
        '%x',
        '@x',
        '`x',
      ),
      fc.stringMatching(/^[a-z ,.;:#'"[\]{}!&*|>%@`?\-\t\u00a0\u2028é]{0,12}$/),
    ),
    fc.constantFrom('', ' ', '  ', '\r', '\t', '\u00a0'),
  )
  .map(([key, sep, value, end]) => `${key}${sep}${value}${end}`);
/** Lines as skills write them: text with punctuation, numbers, lists of tool names. */
const plainLine = fc
  .tuple(
    fc.constantFrom('name', 'description', 'version', 'model', 'allowed-tools', 'x'),
    fc.oneof(
      fc.stringMatching(/^[A-Za-z][A-Za-z0-9 ,.;:()/'_\-é]{0,30}$/),
      fc.integer({ min: 0, max: 10_000 }).map(String),
      fc.array(fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_.-]{0,8}$/), { maxLength: 4 }).map((ws) => `[${ws.join(', ')}]`),
    ),
    fc.constantFrom('', ' ', '\r'),
  )
  .map(([key, value, end]) => `${key}: ${value}${end}`);

function writeSkill(root: string, folder: string, text: string): void {
  mkdirSync(path.join(root, folder), { recursive: true });
  writeFileSync(path.join(root, folder, 'SKILL.md'), text);
}

describe('skills', () => {
  let dir = '';
  afterEach(() => removeHome(dir));

  it('ships a leader and a worker skill that load and follow the contracts', () => {
    const catalog = new SkillCatalog([path.join(PACKAGE_ROOT, 'skills')]);
    expect(catalog.names()).toEqual(['leader', 'worker']);
    const { skills, errors } = catalog.loadAll();
    expect(errors).toEqual([]);
    for (const skill of skills) {
      expect(skill.body).toMatch(/signal_review/);
      expect(skill.allowedTools).toContain('mcp__beidou__signal_review');
    }
  });

  it('lets later roots override earlier ones, and reports load errors clearly', () => {
    dir = tempHome();
    const bundled = path.join(dir, 'bundled');
    const mine = path.join(dir, 'mine');
    writeSkill(bundled, 'worker', '---\nname: worker\ndescription: bundled\n---\nBundled body.');
    writeSkill(
      mine,
      'worker',
      '---\nname: worker\ndescription: mine\nmodel: small\nallowed-tools: Read, Grep\n---\nMy body for {role}.',
    );
    writeSkill(mine, 'nofront', 'Just a body.');
    writeSkill(mine, 'bad-yaml', '---\nname: [unclosed\n---\nBody.');
    writeSkill(mine, 'no-desc', '---\nname: no-desc\n---\nBody.');
    writeSkill(mine, 'misnamed', '---\nname: other\ndescription: d\n---\nBody.');
    writeSkill(mine, 'empty', '---\nname: empty\ndescription: d\n---\n');
    const catalog = new SkillCatalog([bundled, mine, path.join(dir, 'missing-root')]);
    const worker = catalog.load('worker');
    expect(worker).toMatchObject({ description: 'mine', model: 'small', allowedTools: ['Read', 'Grep'] });
    expect(catalog.has('nofront')).toBe(true);
    const reason = (name: string) => {
      try {
        catalog.load(name);
      } catch (err) {
        expect(err).toBeInstanceOf(SkillLoadError);
        return (err as Error).message;
      }
      throw new Error(`${name} loaded`);
    };
    expect(reason('nofront')).toMatch(/missing YAML front matter/);
    expect(reason('bad-yaml')).toMatch(/not valid YAML/);
    expect(reason('no-desc')).toMatch(/"description"/);
    expect(reason('misnamed')).toMatch(/does not match its folder/);
    expect(reason('empty')).toMatch(/body .* is empty/);
    expect(reason('ghost')).toMatch(/no SKILL.md/);
    expect(catalog.loadAll().errors).toHaveLength(5);
  });

  it('reads front matter written with CRLF line endings, a BOM or a yaml tag, and refuses another language', () => {
    dir = tempHome();
    writeSkill(
      dir,
      'crlf',
      '\ufeff---yaml\r\nname: crlf\r\ndescription: written on Windows\r\nallowed-tools: [Read]\r\n---\r\nThe body.\r\n',
    );
    writeSkill(dir, 'json', '---json\n{"name": "json", "description": "d"}\n---\nBody.');
    writeSkill(dir, 'unclosed', '---\nname: unclosed\ndescription: d\n');
    const catalog = new SkillCatalog([dir]);
    expect(catalog.load('crlf')).toMatchObject({
      name: 'crlf',
      description: 'written on Windows',
      allowedTools: ['Read'],
      body: 'The body.',
    });
    expect(() => catalog.load('json')).toThrow(/not valid YAML: the front matter is marked "json"/);
    // No closing line: all of it is front matter, and the body is empty.
    expect(() => catalog.load('unclosed')).toThrow(/body .* is empty/);
    expect(splitFrontMatter('----\nname: x\n---\nb')).toBeNull();
    expect(splitFrontMatter('  ---\nname: x\n---\nb')).toBeNull();
    expect(splitFrontMatter('---\nname: x\n---\n\nbody\n---\nmore')).toEqual({
      matter: '\nname: x',
      body: '\nbody\n---\nmore',
    });
  });

  it('reads simple front matter without the YAML parser exactly as the YAML parser reads it', () => {
    // The bundled skills take the short way: a start loads no YAML parser for them.
    for (const name of ['leader', 'worker']) {
      const split = splitFrontMatter(readFileSync(path.join(PACKAGE_ROOT, 'skills', name, 'SKILL.md'), 'utf8'))!;
      expect(readSimple(split.matter)).toEqual(YAML.parse(split.matter));
    }
    let simple = 0;
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            { arbitrary: plainLine, weight: 4 },
            { arbitrary: trickyLine, weight: 2 },
            { arbitrary: fc.constantFrom('', ' ', '\t', '# comment', '---', '...'), weight: 1 },
          ),
          { minLength: 1, maxLength: 5 },
        ),
        (lines) => {
          const matter = `\n${lines.join('\n')}`;
          const read = readSimple(matter);
          if (read === null) return;
          simple++;
          expect(read).toEqual(YAML.parse(matter) ?? {});
        },
      ),
      { numRuns: 3000 },
    );
    // The generator reaches the short way often enough for the comparison to mean something.
    expect(simple).toBeGreaterThan(300);
  });

  it('assembles the launch prompt in the fixed order, and puts the assignment in the first message', () => {
    const catalog = new SkillCatalog([path.join(PACKAGE_ROOT, 'skills')]);
    const prompt = assemblePrompt(catalog.load('worker'), {
      agent_id: 'ag_1',
      name: 'writer-0001',
      role: 'writer',
      role_description: 'writes the report',
      team_name: 'team-root',
      leader: 'root-0000 (ag_0)',
      workspace_path: '/w/team',
      project_workspace_path: '/w',
    });
    expect(prompt).not.toMatch(/\{(role|role_description|team_name|workspace_path|project_workspace_path)\}/);
    expect(prompt).toContain('You are writer, a member of the team "team-root". Your scope: writes the report');
    const order = [
      'You are writer',
      '## Identity',
      '## Persistent-agent contract',
      '## Completion-handoff contract',
    ].map((s) => prompt.indexOf(s));
    expect(order).toEqual([...order].sort((a, b) => a - b));
    expect(order.every((i) => i >= 0)).toBe(true);
    expect(firstMessage('do it', { plan_task_id: 't1', artifacts_path: '/w/artifacts/t1' })).toBe(
      '[TASK ASSIGNMENT]\nplan_task_id: t1\nartifacts_path: /w/artifacts/t1\n[/TASK ASSIGNMENT]\n\ndo it',
    );
    expect(firstMessage('do it')).toBe('do it');
  });
});
