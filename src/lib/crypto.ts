import { sha256 } from "@oslojs/crypto/sha2";
import { constantTimeEqual } from "@oslojs/crypto/subtle";
import { encodeHexLowerCase } from "@oslojs/encoding";

const encoder = new TextEncoder();

/** Hex SHA-256 of a secret: the only form in which keys and session tokens are stored. */
export function hashSecret(secret: string): string {
  return encodeHexLowerCase(sha256(encoder.encode(secret)));
}

export function secretsMatch(a: string, b: string): boolean {
  const left = encoder.encode(a);
  const right = encoder.encode(b);
  return left.byteLength === right.byteLength && constantTimeEqual(left, right);
}
