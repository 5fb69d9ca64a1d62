/**
 * A timer's `data` as the daemon measures it (§3): the bytes of its JSON text, how deep it
 * nests, and its longest number. The daemon refuses data that some common consumer could not
 * read back (Python's `json` on a 5,000-digit integer, serde_json past a depth of 128).
 */

/** How deep a JSON text nests and how long its longest number is, in one pass (no tree). */
export interface Shape {
  /** The most arrays and objects open at once. */
  readonly depth: number;
  /** Characters of the longest number, sign and exponent included. */
  readonly longestNumber: number;
}

/** The same scan as the daemon's: strings skipped, a number a run of `-+.eE` and digits. */
export function shapeOf(json: string): Shape {
  let depth = 0;
  let deepest = 0;
  let number = 0;
  let longest = 0;
  for (let i = 0; i < json.length; i++) {
    const c = json[i] as string;
    if (number > 0) {
      if ((c >= "0" && c <= "9") || c === "." || c === "e" || c === "E" || c === "+" || c === "-") {
        number += 1;
        continue;
      }
      longest = Math.max(longest, number);
      number = 0;
    }
    if (c === "[" || c === "{") {
      depth += 1;
      deepest = Math.max(deepest, depth);
    } else if (c === "]" || c === "}") {
      depth = Math.max(0, depth - 1);
    } else if (c === "-" || (c >= "0" && c <= "9")) {
      number = 1;
    } else if (c === '"') {
      for (i += 1; i < json.length; i++) {
        if (json[i] === "\\") i += 1;
        else if (json[i] === '"') break;
      }
    }
  }
  return { depth: deepest, longestNumber: Math.max(longest, number) };
}
