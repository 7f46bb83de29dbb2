/**
 * SysV IPC objects a tree left in the host's IPC namespace. Restricted trees
 * cannot make any (seccomp refuses shmget, msgget, semget; their IPC
 * namespace dies with them). Without namespaces a segment would outlive its
 * tree and hold memory no limit counts, so on a root host, where each tree
 * has a uid of its own, whatever that uid created is removed when it ends.
 */
import { readFileSync } from 'node:fs';
import { runCommand } from './run-command.js';

const KINDS = [
  { file: 'shm', id: 'shmid', flag: '-m' },
  { file: 'msg', id: 'msqid', flag: '-q' },
  { file: 'sem', id: 'semid', flag: '-s' },
] as const;

/** Ids of the objects of one kind created by or owned by `uid`. */
function idsOf(file: string, idColumn: string, uid: number): string[] {
  let text: string;
  try {
    text = readFileSync(`/proc/sysvipc/${file}`, 'utf8');
  } catch {
    return [];
  }
  const [header, ...rows] = text.trim().split('\n');
  const names = (header ?? '').trim().split(/\s+/);
  const at = (name: string) => names.indexOf(name);
  const ids: string[] = [];
  for (const row of rows) {
    const cells = row.trim().split(/\s+/);
    if (Number(cells[at('cuid')]) === uid || Number(cells[at('uid')]) === uid) {
      ids.push(cells[at(idColumn)]!);
    }
  }
  return ids;
}

/** Removes every SysV IPC object of `uid` (root host only, with util-linux ipcrm). */
export async function removeIpcOf(ipcrm: string, uid: number): Promise<void> {
  const args: string[] = [];
  for (const kind of KINDS)
    for (const id of idsOf(kind.file, kind.id, uid)) args.push(kind.flag, id);
  if (args.length > 0) await runCommand(ipcrm, args);
}
