// One POST to GATEWAY_URL with the body in BODY, its answer read the way useChat reads it: the
// response body through DefaultChatTransport's own parsing (via its `fetch` hook, so the request
// is the one BODY says), then readUIMessageStream. Prints {status, headers, message, errors,
// chunks}: the UI message the library built, the errors it reported, the chunk types it saw.
import { DefaultChatTransport, readUIMessageStream } from "ai";

const body = JSON.parse(process.env.BODY);
let response;
const transport = new DefaultChatTransport({
  api: process.env.GATEWAY_URL,
  prepareSendMessagesRequest: () => ({ body }),
  fetch: async (url, init) => { response = await fetch(url, init); return response.clone(); },
});
const errors = [];
const chunks = [];
let message = null;
let failed = null;
try {
  const stream = await transport.sendMessages({
    chatId: body.id, messages: body.messages, trigger: "submit-message", messageId: undefined,
  });
  const seen = stream.pipeThrough(new TransformStream({
    transform(c, ctl) { chunks.push(c.type); ctl.enqueue(c); },
  }));
  for await (const m of readUIMessageStream({ stream: seen, onError: (e) => errors.push(e.message) })) {
    message = m;
  }
} catch (e) {
  failed = { name: e.name, message: e.message, statusCode: e.statusCode ?? null };
}
console.log(JSON.stringify({
  status: response?.status ?? null,
  headers: response ? Object.fromEntries(response.headers) : {},
  message, errors, chunks, failed,
}));
