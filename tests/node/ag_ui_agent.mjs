// A fake AG-UI agent endpoint, as an agent server built on @ag-ui/core answers: every input is
// validated with the protocol's own RunAgentInputSchema (an invalid one is answered 400 with the
// schema's issues), every event it sends with EventSchema, framed as SSE data lines.
//
// Prints {"port": N} once listening on 127.0.0.1. POST (any path): a run. GET /inputs: every
// input it was sent, as JSON.
//
// What it answers, from the input:
// - the last message is a tool result: "The tool said <content>." (the frontend tool's answer);
// - a tool named get_weather is offered: text, then a call to get_weather (left for the client),
//   after a call to its own `lookup` tool it answers itself (TOOL_CALL_RESULT);
// - else: reasoning, then "Turn <n>: you said <last user text>.", with the state's `turns`
//   counted up (STATE_SNAPSHOT, then a STATE_DELTA), and CUSTOM sources and followups.
// Usage is always reported on RUN_FINISHED.
import http from "node:http";
import { EventSchema, RunAgentInputSchema } from "@ag-ui/core/schemas";

const inputs = [];

function textOf(content) {
  if (typeof content === "string") return content;
  return (content ?? []).filter((p) => p.type === "text").map((p) => p.text).join("");
}

function runEvents(input) {
  const run = { threadId: input.threadId, runId: input.runId };
  const events = [{ type: "RUN_STARTED", ...run, protocolVersion: "1.0" }];
  const last = input.messages[input.messages.length - 1];
  const message = (id, text, name) => [
    { type: "TEXT_MESSAGE_START", messageId: id, role: "assistant", ...(name ? { name } : {}) },
    { type: "TEXT_MESSAGE_CONTENT", messageId: id, delta: text.slice(0, 5) },
    { type: "TEXT_MESSAGE_CONTENT", messageId: id, delta: text.slice(5) },
    { type: "TEXT_MESSAGE_END", messageId: id },
  ];
  const usage = [{ model: "agent-model", inputTokens: 13, outputTokens: 8, totalTokens: 21 }];
  if (last.role === "tool") {
    events.push(...message("answer-1", `The tool said ${textOf(last.content)}.`));
  } else if ((input.tools ?? []).some((t) => t.name === "get_weather")) {
    events.push(
      { type: "TOOL_CALL_START", toolCallId: "own-1", toolCallName: "lookup" },
      { type: "TOOL_CALL_ARGS", toolCallId: "own-1", delta: "{\"q\":\"city\"}" },
      { type: "TOOL_CALL_END", toolCallId: "own-1" },
      { type: "TOOL_CALL_RESULT", messageId: "own-result-1", toolCallId: "own-1", content: "Paris" },
      ...message("call-1", "Let me check the weather."),
      { type: "TOOL_CALL_START", toolCallId: "call_w1", toolCallName: "get_weather",
        parentMessageId: "call-1" },
      { type: "TOOL_CALL_ARGS", toolCallId: "call_w1", delta: "{\"city\":" },
      { type: "TOOL_CALL_ARGS", toolCallId: "call_w1", delta: "\"Paris\"}" },
      { type: "TOOL_CALL_END", toolCallId: "call_w1" },
    );
  } else {
    const state = input.state && typeof input.state === "object" ? input.state : {};
    const turns = (state.turns ?? 0) + 1;
    events.push(
      { type: "STATE_SNAPSHOT", snapshot: { ...state, turns: turns - 1, thread: input.threadId } },
      { type: "REASONING_START", messageId: "r1" },
      { type: "REASONING_MESSAGE_START", messageId: "r1-m", role: "reasoning" },
      { type: "REASONING_MESSAGE_CONTENT", messageId: "r1-m", delta: "The user spoke; " },
      { type: "REASONING_MESSAGE_CONTENT", messageId: "r1-m", delta: "I answer." },
      { type: "REASONING_MESSAGE_END", messageId: "r1-m" },
      { type: "REASONING_END", messageId: "r1" },
      { type: "CUSTOM", name: "sources", value: [
        { id: "handbook.pdf#page=4", title: "handbook.pdf#page=4", snippet: "Turns are counted." }] },
      ...message(`answer-${turns}`, `Turn ${turns}: you said ${textOf(last.content)}.`),
      { type: "STATE_DELTA", delta: [{ op: "replace", path: "/turns", value: turns }] },
      { type: "CUSTOM", name: "followups", value: ["And then?"] },
    );
  }
  events.push({ type: "RUN_FINISHED", ...run, usage });
  return events.map((e) => EventSchema.parse(e));
}

const server = http.createServer((req, res) => {
  if (req.method === "GET" && req.url === "/inputs") {
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(JSON.stringify(inputs));
    return;
  }
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    let input;
    try {
      input = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    } catch (e) {
      res.writeHead(400, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ detail: `not JSON: ${e.message}` }));
      return;
    }
    inputs.push({ input, accept: req.headers.accept ?? null });
    const parsed = RunAgentInputSchema.safeParse(input);
    if (!parsed.success) {
      res.writeHead(400, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ detail: `invalid RunAgentInput: ${JSON.stringify(parsed.error.issues)}` }));
      return;
    }
    res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
    for (const event of runEvents(parsed.data)) {
      res.write(`data: ${JSON.stringify(event)}\n\n`);
    }
    res.end();
  });
});

server.listen(0, "127.0.0.1", () => {
  console.log(JSON.stringify({ port: server.address().port }));
});
process.stdin.on("end", () => server.close(() => process.exit(0)));
process.stdin.resume();
