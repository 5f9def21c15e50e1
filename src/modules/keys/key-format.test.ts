import { describe, expect, test } from "bun:test";
import { generateKeySecret, isWellFormedKey, keyPrefixOf } from "./key-format";

describe("API key format", () => {
  test("a generated key is prefix + 32 base62 + 6 checksum characters and validates", () => {
    const key = generateKeySecret("pps_");
    expect(key).toMatch(/^pps_[0-9A-Za-z]{38}$/);
    expect(isWellFormedKey(key, "pps_")).toBe(true);
    expect(keyPrefixOf(key)).toBe(key.slice(0, 8));
  });

  test("the checksum is the CRC-32 of the text before it in base62, zero-padded", () => {
    const body = `pps_${"a".repeat(32)}`;
    let crc = Bun.hash.crc32(body);
    let encoded = "";
    const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    while (crc > 0) {
      encoded = alphabet[crc % 62] + encoded;
      crc = Math.floor(crc / 62);
    }
    expect(isWellFormedKey(body + encoded.padStart(6, "0"), "pps_")).toBe(true);
  });

  test("a key with one changed character, another prefix, or a wrong length is rejected", () => {
    const key = generateKeySecret("pps_");
    const flipped = key.slice(0, 10) + (key[10] === "a" ? "b" : "a") + key.slice(11);
    expect(isWellFormedKey(flipped, "pps_")).toBe(false);
    expect(isWellFormedKey(key, "abc_")).toBe(false);
    expect(isWellFormedKey(`${key}0`, "pps_")).toBe(false);
    expect(isWellFormedKey(key.slice(0, -1), "pps_")).toBe(false);
    expect(isWellFormedKey("", "pps_")).toBe(false);
  });

  test("generated keys do not repeat", () => {
    const keys = new Set(Array.from({ length: 1000 }, () => generateKeySecret("pps_")));
    expect(keys.size).toBe(1000);
  });
});
