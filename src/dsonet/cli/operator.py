"""`dso node keys` and `dso node quarantine`: the operator's commands, over a running node's API
(`dsonet.network.admin`; the node's token is needed where it has one)."""

from __future__ import annotations

import json

import click
import httpx

from dsonet.cli.options import json_option

_url = click.option("--node", "url", metavar="URL", envvar="DSONET_NODE", default="http://127.0.0.1:8080",
                    show_default=True, help="The node's API (env DSONET_NODE).")
_token = click.option("--node-token", envvar="DSONET_NODE_TOKEN", default=None,
                      help="The node's API token (env DSONET_NODE_TOKEN).")


def _call(method: str, url: str, path: str, token: str | None, **kwargs) -> dict:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        r = httpx.request(method, url.rstrip("/") + path, headers=headers, timeout=30, **kwargs)
    except httpx.HTTPError as exc:
        raise click.ClickException(f"--node {url}: {exc}; is the node running there?") from None
    if r.status_code >= 400:
        try:
            detail = r.json().get("detail", r.text)
        except ValueError:
            detail = r.text
        hint = "; give --node-token" if r.status_code == 401 else ""
        raise click.ClickException(f"{method} {path}: {r.status_code} {detail}{hint}")
    return r.json()


@click.command()
@_url
@_token
@click.option("--ban", metavar="KEY", help="Refuse this key's batches, hide its rows, drop its held-back batches.")
@click.option("--reset", metavar="KEY", help="Lift this key's ban; back to the initial reputation, counts at zero.")
@json_option
def keys(url: str, node_token: str | None, ban: str | None, reset: str | None, as_json: bool) -> None:
    """List the keys a node has heard from, with their standing; or ban or reset one.

    \b
    Examples:
      dso node keys --node http://127.0.0.1:8080 --node-token $T
      dso node keys --ban 3f9c...e1 --node-token $T
    """
    if ban and reset:
        raise click.UsageError("--ban and --reset: give one of them")
    if ban or reset:
        out = _call("POST", url, f"/keys/{ban or reset}/{'ban' if ban else 'reset'}", node_token)
        click.echo(json.dumps(out) if as_json else f"{out['node_id'][:16]}: {'banned' if out['banned'] else 'reset'}")
        return
    listed = _call("GET", url, "/keys", node_token)["keys"]
    if as_json:
        click.echo(json.dumps(listed, indent=2))
        return
    for k in listed:
        click.echo(f"{k['node_id'][:16]}  reputation {k['reputation']:.3f}  accepted {k['accepted']}  rejected "
                   f"{k['rejected']}  deferred {k['deferred']}{'  BANNED' if k['banned'] else ''}")


@click.command()
@_url
@_token
@click.option("--drop", "drop", type=int, multiple=True, metavar="SEQ", help="Forget this quarantined row (repeat).")
@click.option("--drop-all", is_flag=True, help="Forget every quarantined row.")
@json_option
def quarantine(url: str, node_token: str | None, drop: tuple[int, ...], drop_all: bool, as_json: bool) -> None:
    """List the library rows a node set aside as damaged; or drop them once seen.

    \b
    Examples:
      dso node quarantine --node-token $T
      dso node quarantine --drop 42 --node-token $T
    """
    if drop or drop_all:
        out = _call("DELETE", url, "/quarantine", node_token, params={"seq": list(drop)} if drop else None)
        click.echo(json.dumps(out) if as_json else f"dropped {out['dropped']}")
        return
    out = _call("GET", url, "/quarantine", node_token)
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    for q in out["quarantined"]:
        click.echo(f"{q['seq']}  {q['id'][:16]}  from {q['signer'][:16]}: {q['why']}")
    click.echo(f"{out['count']} quarantined")
