// Writes what the AI SDK's own server side sends for a few answers (streamText over a scripted
// model, then toUIMessageStreamResponse): the samples of the ai-sdk-ui dialect come from here.
// Usage: node capture_ui_stream.mjs <case>   (text | tools | reasoning | error); prints the body.
import { jsonSchema, streamText, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";

const usage = {
  inputTokens: { total: 12, noCache: 12, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 7, text: 7, reasoning: undefined },
};
const finish = (unified) => ({ type: "finish", finishReason: { unified, raw: unified }, usage });
const cases = {
  text: [
    { type: "stream-start", warnings: [] },
    { type: "text-start", id: "txt-0" },
    { type: "text-delta", id: "txt-0", delta: "Hello" },
    { type: "text-delta", id: "txt-0", delta: " there, how can I help?" },
    { type: "text-end", id: "txt-0" },
    finish("stop"),
  ],
  tools: [
    { type: "stream-start", warnings: [] },
    { type: "text-start", id: "txt-0" },
    { type: "text-delta", id: "txt-0", delta: "Let me check." },
    { type: "text-end", id: "txt-0" },
    { type: "tool-input-start", id: "call_1", toolName: "getWeather" },
    { type: "tool-input-delta", id: "call_1", delta: '{"city":' },
    { type: "tool-input-delta", id: "call_1", delta: '"Paris"}' },
    { type: "tool-input-end", id: "call_1" },
    { type: "tool-call", toolCallId: "call_1", toolName: "getWeather", input: '{"city":"Paris"}' },
    finish("tool-calls"),
  ],
  reasoning: [
    { type: "stream-start", warnings: [] },
    { type: "reasoning-start", id: "r-0" },
    { type: "reasoning-delta", id: "r-0", delta: "9.11 vs 9.9: " },
    { type: "reasoning-delta", id: "r-0", delta: "compare the tenths." },
    { type: "reasoning-end", id: "r-0" },
    { type: "text-start", id: "txt-1" },
    { type: "text-delta", id: "txt-1", delta: "9.9 is larger." },
    { type: "text-end", id: "txt-1" },
    finish("stop"),
  ],
  error: [
    { type: "stream-start", warnings: [] },
    { type: "text-start", id: "txt-0" },
    { type: "text-delta", id: "txt-0", delta: "Partial" },
    { type: "error", error: new Error("model overloaded") },
  ],
};

const name = process.argv[2];
const model = new MockLanguageModelV4({
  doStream: async () => ({
    stream: new ReadableStream({
      start(c) { for (const p of cases[name]) c.enqueue(p); c.close(); },
    }),
  }),
});
const result = streamText({
  model,
  prompt: "hi",
  tools: { getWeather: tool({ description: "the weather", inputSchema: jsonSchema({
    type: "object", properties: { city: { type: "string" } }, required: ["city"] }) }) },
});
const response = result.toUIMessageStreamResponse({
  sendReasoning: true,
  onError: (e) => (e instanceof Error ? e.message : String(e)),
  // what an app's route commonly puts in its messages' metadata (the SDK sends none itself)
  messageMetadata: ({ part }) => (part.type === "finish" ? { usage: {
    inputTokens: part.totalUsage.inputTokens, outputTokens: part.totalUsage.outputTokens,
    totalTokens: part.totalUsage.totalTokens }, finishReason: part.finishReason } : undefined),
});
process.stdout.write(JSON.stringify({ headers: Object.fromEntries(response.headers),
                                      body: await response.text() }));
