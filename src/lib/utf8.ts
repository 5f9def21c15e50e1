/**
 * One UTF-8 body from text and from pieces already encoded (a product's `data`, serialized once):
 * the encoded pieces are copied, never decoded and encoded again, and the body goes out as bytes.
 */
export function joinUTF8(parts: ReadonlyArray<string | Uint8Array>): Buffer {
  let length = 0;
  for (const part of parts) length += typeof part === "string" ? Buffer.byteLength(part) : part.byteLength;
  const body = Buffer.allocUnsafe(length);
  let offset = 0;
  for (const part of parts) {
    if (typeof part === "string") offset += body.write(part, offset);
    else {
      body.set(part, offset);
      offset += part.byteLength;
    }
  }
  return body;
}
