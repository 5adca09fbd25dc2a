"""dsonet as an OpenAI-compatible proxy (`dso proxy`): lessons injected into every request's system message."""
