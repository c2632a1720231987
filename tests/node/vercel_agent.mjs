// The Vercel AI SDK as an agent uses it, through one gateway route: a multi-step tool loop
// (generateText and streamText, stopWhen), structured output (Output.object with a zod schema)
// and an error, with the provider's defaults. Prints what the SDK produced and the bodies the
// provider sent (to see its wire choices, such as item_reference).
//
// Env: GATEWAY_BASE (the provider's baseURL), PROVIDER (vercel-chat | vercel-responses |
// vercel-anthropic), API_KEY.
import { generateText, Output, stepCountIs, streamText, tool } from "ai";
import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAI } from "@ai-sdk/openai";
import { z } from "zod";

const base = process.env.GATEWAY_BASE;
const provider = process.env.PROVIDER;
const apiKey = process.env.API_KEY ?? "sk-test";

const sent = [];
const recordingFetch = async (url, init) => {
  sent.push({ url: String(url), body: init?.body ? JSON.parse(init.body) : null });
  return fetch(url, init);
};

function model() {
  if (provider === "vercel-anthropic") {
    return createAnthropic({ baseURL: base, apiKey, fetch: recordingFetch })("claude-sonnet-4-5");
  }
  const openai = createOpenAI({ baseURL: base, apiKey, fetch: recordingFetch });
  if (provider === "vercel-chat") return openai.chat("gpt-4o-mini");
  if (provider === "vercel-responses") return openai.responses("gpt-4o-mini");
  throw new Error(`unknown PROVIDER ${provider}`);
}

const tools = {
  get_weather: tool({
    description: "The weather in a city",
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => ({ city, forecast: "sunny" }),
  }),
};
const loop = { tools, stopWhen: stepCountIs(4), maxRetries: 0, prompt: "Weather in Paris?" };

const usageOf = (u) => ({ input: u?.inputTokens ?? null, output: u?.outputTokens ?? null });
const stepsOf = (steps) => steps.map((s) => ({
  text: s.text,
  finishReason: s.finishReason,
  toolCalls: s.toolCalls.map((c) => [c.toolName, c.input]),
  toolResults: s.toolResults.map((r) => [r.toolName, r.output]),
}));

const out = {};

const whole = await generateText({ model: model(), ...loop });
out.generate = {
  text: whole.text, finishReason: whole.finishReason, usage: usageOf(whole.totalUsage),
  steps: stepsOf(whole.steps), requests: sent.splice(0),
};

const streamErrors = [];
const streamed = streamText({ model: model(), ...loop, onError: ({ error }) => {
  streamErrors.push(String(error?.message ?? error));
} });
let text = "";
for await (const piece of streamed.textStream) text += piece;
out.stream = {
  text, finishReason: await streamed.finishReason, usage: usageOf(await streamed.totalUsage),
  steps: stepsOf(await streamed.steps), errors: streamErrors, requests: sent.splice(0),
};

const shaped = await generateText({
  model: model(), maxRetries: 0, prompt: "The weather in Paris, as JSON.",
  output: Output.object({ schema: z.object({ city: z.string(), temperature: z.number() }) }),
});
out.object = { output: shaped.output, requests: sent.splice(0) };

try {
  await generateText({ model: model(), maxRetries: 0, prompt: "FAIL now" });
  out.error = null;
} catch (e) {
  out.error = { name: e?.name, status: e?.statusCode ?? null, message: String(e?.message) };
}
sent.splice(0);

console.log(JSON.stringify(out));
