"""`dso llm serve` refuses what it cannot serve before it loads a model (the model itself: tests/serve)."""

from click.testing import CliRunner

from dsonet.cli.main import cli


def test_beyond_loopback_it_needs_a_token_and_says_so():
    result = CliRunner().invoke(cli, ["llm", "serve", "--host", "0.0.0.0"])
    assert result.exit_code == 1 and "needs --token" in result.output


def test_an_unknown_model_is_a_usage_error_that_lists_the_embedded_ones():
    result = CliRunner().invoke(cli, ["llm", "serve", "--model", "gpt-4o"])
    assert result.exit_code == 2 and "qwen2.5-coder-0.5b" in result.output
