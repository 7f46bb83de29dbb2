// Removes last run's test reports so the summary never counts a stale one.
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';

for (const root of ['packages', 'examples']) {
  for (const name of readdirSync(root)) {
    rmSync(join(root, name, 'test-results.json'), { force: true });
    rmSync(join(root, name, 'test-errors.json'), { force: true });
  }
}
