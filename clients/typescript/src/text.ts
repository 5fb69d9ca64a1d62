/**
 * Text as the daemon measures and quotes it, so the client's refusals read exactly like the
 * daemon's: lengths in Unicode scalar values (Rust's `chars().count()`), control characters as
 * Rust's `char::is_control` sees them, and values quoted as Rust's `{:?}` prints them.
 */

/** Characters as the daemon counts them: code points, not UTF-16 units. */
export function charCount(text: string): number {
  let count = 0;
  for (const _ of text) count += 1;
  return count;
}

/** Unicode's control characters (category Cc): U+0000–U+001F and U+007F–U+009F. */
export function isControl(codePoint: number): boolean {
  return codePoint <= 0x1f || (codePoint >= 0x7f && codePoint <= 0x9f);
}

export function hasControl(text: string): boolean {
  for (const c of text) {
    if (isControl(c.codePointAt(0) ?? 0)) return true;
  }
  return false;
}

/** `text` quoted as Rust's `Debug` for `str` prints it (the daemon quotes values so). */
export function quoted(text: string): string {
  let out = '"';
  for (const c of text) {
    const code = c.codePointAt(0) ?? 0;
    switch (c) {
      case "\t":
        out += "\\t";
        break;
      case "\r":
        out += "\\r";
        break;
      case "\n":
        out += "\\n";
        break;
      case "\\":
        out += "\\\\";
        break;
      case '"':
        out += '\\"';
        break;
      case "\0":
        out += "\\0";
        break;
      default:
        out += isControl(code) ? `\\u{${code.toString(16)}}` : c;
    }
  }
  return `${out}"`;
}

/** UTF-8 length in bytes, as the broker and the daemon count a message. */
export function utf8Bytes(text: string): number {
  return Buffer.byteLength(text, "utf8");
}
