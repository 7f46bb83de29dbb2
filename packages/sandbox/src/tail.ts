/** A bounded stderr tail: the end of a stream kept for error messages, the whole counted. */
/** Keeps the last `max` bytes of a stream and counts all of it. */
export class TailBuffer {
  private chunks: Buffer[] = [];
  private size = 0;
  total = 0;

  constructor(private readonly max: number) {}

  push(chunk: Buffer): void {
    this.total += chunk.length;
    if (this.max === 0) return;
    this.chunks.push(chunk);
    this.size += chunk.length;
    while (this.chunks.length > 1 && this.size - this.chunks[0]!.length >= this.max) {
      this.size -= this.chunks.shift()!.length;
    }
  }

  text(): string {
    const all = Buffer.concat(this.chunks);
    return all.subarray(Math.max(0, all.length - this.max)).toString('utf8');
  }
}
