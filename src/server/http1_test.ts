/**
 * Specs of the HTTP/1.1 subset the servers speak: where a head ends, what parses and what is
 * refused with which status, and how a response is written.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  errorResponse,
  findHeadEnd,
  parseRequestHead,
  RequestHeadError,
  responseBytes,
} from "./http1.ts";

const bytes = (text: string) => new TextEncoder().encode(text);
const base = "http://0.0.0.0:10256";
const parse = (text: string) => parseRequestHead(bytes(text), { base });

Deno.test("findHeadEnd() finds the empty line ending a head, with CRLF or bare LF", () => {
  const crlf = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
  assert.equal(findHeadEnd(bytes(crlf)), crlf.length);
  assert.equal(findHeadEnd(bytes(`${crlf}GET /next`)), crlf.length);
  const lf = "GET / HTTP/1.1\nHost: a\n\n";
  assert.equal(findHeadEnd(bytes(lf)), lf.length);
  assert.equal(findHeadEnd(bytes("GET / HTTP/1.1\r\nHost: a\r\n")), -1, "half a head");
  assert.equal(findHeadEnd(bytes("")), -1);
});

Deno.test("findHeadEnd() skips empty lines before the request line, as Go's server does", () => {
  const text = "\r\n\r\nGET / HTTP/1.1\r\n\r\n";
  assert.equal(findHeadEnd(bytes(text)), text.length);
  assert.equal(findHeadEnd(bytes("\r\n\r\n")), -1);
});

Deno.test("parseRequestHead() reads a probe's GET into a Request that may be kept alive", () => {
  const { request, keepAlive } = parse(
    "GET /healthz?x=1 HTTP/1.1\r\nHost: node-a:10256\r\nUser-Agent: kube-probe/1.31\r\n\r\n",
  );
  assert.equal(request.method, "GET");
  assert.equal(request.url, "http://node-a:10256/healthz?x=1");
  assert.equal(request.headers.get("user-agent"), "kube-probe/1.31");
  assert.equal(keepAlive, true);
});

Deno.test("parseRequestHead() keeps alive only HTTP/1.1 without Connection: close or a body", () => {
  const cases: [string, boolean][] = [
    ["GET / HTTP/1.1\r\n\r\n", true],
    ["GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n", false],
    ["GET / HTTP/1.0\r\n\r\n", false],
    ["POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\n", false],
    ["POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", false],
    ["POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", true],
  ];
  for (const [head, keepAlive] of cases) assert.equal(parse(head).keepAlive, keepAlive, head);
});

Deno.test("parseRequestHead() takes the listener's address when Host is missing or unusable", () => {
  assert.equal(parse("GET /livez HTTP/1.1\r\n\r\n").request.url, `${base}/livez`);
  assert.equal(parse("GET /livez HTTP/1.1\r\nHost: a b\r\n\r\n").request.url, `${base}/livez`);
  assert.equal(
    parse("GET http://node:10256/metrics HTTP/1.1\r\n\r\n").request.url,
    "http://node:10256/metrics",
    "absolute form",
  );
});

Deno.test("parseRequestHead() refuses what it does not speak, with the status to answer", () => {
  const cases: [string, number][] = [
    ["GARBAGE\r\n\r\n", 400],
    ["get / HTTP/1.1\r\n\r\n", 400],
    ["GET / HTTP/2.0\r\n\r\n", 505],
    ["GET * HTTP/1.1\r\n\r\n", 400],
    ["GET //host:99999/ HTTP/1.1\r\n\r\n", 400],
    ["GET / HTTP/1.1\r\n folded\r\n\r\n", 400],
    ["GET / HTTP/1.1\r\nno colon\r\n\r\n", 400],
    ["GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400],
    ["GET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400],
    ["GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400],
    ["CONNECT / HTTP/1.1\r\n\r\n", 405],
  ];
  for (const [head, status] of cases) {
    assert.throws(
      () => parse(head),
      (err) => err instanceof RequestHeadError && err.status === status,
      JSON.stringify(head),
    );
  }
});

Deno.test("responseBytes() writes status, headers, Date and Content-Length, and Connection: close unless kept alive", async () => {
  const res = new Response('{"ok":true}', {
    status: 503,
    headers: { "content-type": "application/json", "connection": "upgrade" },
  });
  const text = new TextDecoder().decode(
    await responseBytes(res, { keepAlive: false, now: Date.UTC(2026, 0, 2, 3, 4, 5) }),
  );
  assert.equal(
    text,
    "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n" +
      "date: Fri, 02 Jan 2026 03:04:05 GMT\r\ncontent-length: 11\r\nconnection: close\r\n\r\n" +
      '{"ok":true}',
  );
  const kept = new TextDecoder().decode(
    await responseBytes(new Response("ok"), { keepAlive: true }),
  );
  assert.match(kept, /^HTTP\/1\.1 200 OK\r\n/);
  assert.doesNotMatch(kept, /connection:/);
  assert.match(kept, /content-length: 2\r\n\r\nok$/);
});

Deno.test("responseBytes() answers HEAD with the body's length and no body", async () => {
  const text = new TextDecoder().decode(
    await responseBytes(new Response("12345"), { keepAlive: true, head: true }),
  );
  assert.match(text, /content-length: 5\r\n\r\n$/);
});

Deno.test("errorResponse() is a short plain-text answer", async () => {
  const res = errorResponse(431);
  assert.equal(res.status, 431);
  assert.equal(await res.text(), "Request Header Fields Too Large\n");
});
