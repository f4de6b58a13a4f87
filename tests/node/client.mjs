// The official openai npm client against a running `homespec serve`: plain chat, a stream with
// usage, a forced tool call, structured output and logprobs. Prints one JSON line of findings;
// tests/test_server_node.py checks them. Usage: node client.mjs BASE_URL
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "any", maxRetries: 0, timeout: 120000 });
const ask = [{ role: "user", content: "What is the weather in Paris?" }];
const weather = {
  type: "function",
  function: {
    name: "get_weather",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};

const chat = await client.chat.completions.create({ model: "m", messages: ask, max_tokens: 8, temperature: 0 });
let streamed = "";
let usage = null;
const stream = await client.chat.completions.create({
  model: "m", messages: ask, max_tokens: 8, temperature: 0, stream: true, stream_options: { include_usage: true },
});
for await (const c of stream) {
  if (c.choices.length) streamed += c.choices[0].delta.content ?? "";
  if (c.usage) usage = c.usage;
}
const called = await client.chat.completions.create({
  model: "m", messages: ask, tools: [weather], tool_choice: "required", parallel_tool_calls: false,
  temperature: 0, max_tokens: 60,
});
const schema = { type: "object", properties: { name: { type: "string" }, age: { type: "integer" } },
                 required: ["name", "age"], additionalProperties: false };
const structured = await client.chat.completions.create({
  model: "m", messages: [{ role: "user", content: "Bob is 7. Describe him." }], temperature: 0, max_tokens: 60,
  response_format: { type: "json_schema", json_schema: { name: "person", schema, strict: true } },
});
const scored = await client.chat.completions.create({
  model: "m", messages: ask, max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 2,
});
console.log(JSON.stringify({
  text: chat.choices[0].message.content,
  streamed,
  usage,
  call: called.choices[0].message.tool_calls?.[0]?.function ?? null,
  finish: called.choices[0].finish_reason,
  structured: JSON.parse(structured.choices[0].message.content),
  logprobs: scored.choices[0].logprobs.content.length,
}));
