"""How a model family writes tool calls and thinking in its answers, and how to read them back.

Each tool-call syntax has its own module (hermes: Qwen / Hermes / SmolLM3 `<tool_call>` JSON;
llama3: Llama 3.x JSON; mistral: `[TOOL_CALLS]`; harmony: gpt-oss's channels; deepseek: DeepSeek
V3 / R1's call tokens; glm: GLM-4.5's `<arg_key>` pairs), chosen from the chat template
(`detect.tool_format`). `reasoning.py` splits `<think>` blocks; `split.py` turns a growing answer
into OpenAI's deltas (content, reasoning_content, tool calls written out as they are written:
`partial.py` reads the JSON of a call before it closes) as it streams.
"""

from homespec.chatformat.base import Parsed, ToolCall, ToolFormat
from homespec.chatformat.detect import takes_tools, tool_format

__all__ = ["Parsed", "ToolCall", "ToolFormat", "takes_tools", "tool_format"]
