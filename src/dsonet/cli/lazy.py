"""A click group that imports a command only when it is run or its help is shown.

`dso --help` must stay fast, and most commands pull in torch or a model; so the group holds
"module:attribute" strings and each command's short help, and imports on demand.
"""

from __future__ import annotations

import importlib

import click


class LazyGroup(click.Group):
    def __init__(self, *args, lazy: dict[str, tuple[str, str]] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = lazy or {}  # name -> ("module:attr", short help)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy:
            target, _ = self.lazy[name]
            module, attr = target.split(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, self.lazy[name][1]) for name in sorted(self.lazy)]
        rows += [(n, c.get_short_help_str()) for n, c in sorted(self.commands.items())]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(sorted(rows))
