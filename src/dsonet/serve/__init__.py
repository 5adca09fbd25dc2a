"""The embedded model served (`dso llm serve`): OpenAI's chat completions, streaming and tool calls, offline.

    from dsonet.serve import ServedModel, create_app
    app = create_app(ServedModel.of(embedded("qwen2.5-coder-0.5b"), "qwen2.5-coder-0.5b"))

A request walks one way: checked (`request`) → the model's own chat template (`template`) →
tokens → the worker (`worker`: what waits goes to the model's slots in one call) → text → tool
calls (`tools`) → OpenAI's completion or its chunks (`app`).
"""

from dsonet.serve.app import create_app
from dsonet.serve.model import ServedModel

__all__ = ["ServedModel", "create_app"]
