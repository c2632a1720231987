// A backend written as a Next.js route of the AI SDK is (POST: UI messages in,
// createUIMessageStream out), on a free 127.0.0.1 port, with a scripted model instead of a
// provider. It first checks what it is sent with the SDK itself (validateUIMessages, then
// convertToModelMessages: what a real route does with it), answers 400 with the SDK's message
// when that fails, and otherwise streams: a source, the session state it keeps (a data part:
// the turn number, one more than the state it was sent), then the model's text
// "You said: <the last user text>" with usage in the finish's metadata.
// Prints {"port": n} once listening; GET /seen gives the bodies it was sent.
import http from "node:http";
import {
  convertToModelMessages,
  createUIMessageStream,
  pipeUIMessageStreamToResponse,
  streamText,
  validateUIMessages,
} from "ai";
import { MockLanguageModelV4 } from "ai/test";

const seen = [];

function model(text) {
  return new MockLanguageModelV4({
    doStream: async () => ({
      stream: new ReadableStream({
        start(c) {
          c.enqueue({ type: "stream-start", warnings: [] });
          c.enqueue({ type: "text-start", id: "t0" });
          for (const piece of text.match(/.{1,8}/gsu) ?? []) {
            c.enqueue({ type: "text-delta", id: "t0", delta: piece });
          }
          c.enqueue({ type: "text-end", id: "t0" });
          c.enqueue({ type: "finish", finishReason: { unified: "stop", raw: "stop" }, usage: {
            inputTokens: { total: 5, noCache: 5, cacheRead: undefined, cacheWrite: undefined },
            outputTokens: { total: 4, text: 4, reasoning: undefined } } });
          c.close();
        },
      }),
    }),
  });
}

async function chat(req, res) {
  let raw = "";
  for await (const piece of req) raw += piece;
  const body = JSON.parse(raw);
  seen.push(body);
  let modelMessages;
  try {
    const messages = await validateUIMessages({ messages: body.messages });
    modelMessages = await convertToModelMessages(messages);
  } catch (e) {
    res.writeHead(400, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: e.message }));
    return;
  }
  const lastUser = [...modelMessages].reverse().find((m) => m.role === "user");
  const said = typeof lastUser?.content === "string" ? lastUser.content
    : (lastUser?.content ?? []).filter((p) => p.type === "text").map((p) => p.text).join("");
  const turn = (typeof body.sessionState === "number" ? body.sessionState : 0) + 1;
  const stream = createUIMessageStream({
    onError: (e) => (e instanceof Error ? e.message : String(e)),
    execute: ({ writer }) => {
      writer.write({ type: "source-url", sourceId: "https://example.com/doc",
                     url: "https://example.com/doc", title: "The doc" });
      writer.write({ type: "data-session-state", id: "session-state", data: turn });
      // this SDK takes a system prompt as `instructions`, never among the messages
      const system = modelMessages.filter((m) => m.role === "system").map((m) => m.content);
      const result = streamText({
        model: model(`You said: ${said}`),
        instructions: system.length ? system.join("\n") : undefined,
        messages: modelMessages.filter((m) => m.role !== "system"),
      });
      writer.merge(result.toUIMessageStream({
        sendStart: false,
        onError: (e) => (e instanceof Error ? e.message : String(e)),
        messageMetadata: ({ part }) => (part.type === "finish" ? { usage: {
          inputTokens: part.totalUsage.inputTokens, outputTokens: part.totalUsage.outputTokens,
          totalTokens: part.totalUsage.totalTokens } } : undefined),
      }));
    },
  });
  pipeUIMessageStreamToResponse({ response: res, stream });
}

const server = http.createServer((req, res) => {
  if (req.method === "GET" && req.url === "/seen") {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(seen));
    return;
  }
  chat(req, res).catch((e) => { res.writeHead(500); res.end(String(e)); });
});
server.listen(0, "127.0.0.1", () => {
  console.log(JSON.stringify({ port: server.address().port }));
});
