/** uWebSockets' cork buffer in Bun: a response that fits in it leaves in one write wherever it completes. */
const CORK_BUFFER_BYTES = 16 * 1024;

/**
 * A body for an answer that completes after an `await`. Bun 1.4 writes such an answer uncorked when
 * its body does not fit the cork buffer: one send() per header fragment (about 60 segments for a
 * price answer's headers) before the body (oven-sh/bun#41341), which made a batch of 100 cost about
 * twice its own work. A stream body is written corked (headers in one send, the body in the next),
 * so a large body goes out as a one-chunk stream (chunked transfer coding instead of Content-Length).
 */
export function sendableBody(body: Uint8Array): Uint8Array | Response {
  if (body.byteLength <= CORK_BUFFER_BYTES) return body;
  return new Response(
    new ReadableStream({
      start(controller) {
        controller.enqueue(body);
        controller.close();
      },
    }),
  );
}
