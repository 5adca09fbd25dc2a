"""`dso node ...` (run a node) and `dso cluster ...` (a NATS cluster on this machine, for development)."""

from __future__ import annotations

import json
import logging
import os
import tomllib
from dataclasses import fields
from pathlib import Path

import click

from dsonet.cli.operator import keys, quarantine
from dsonet.cli.options import HOME, json_option, token_option
from dsonet.errors import DsoError
from dsonet.identity import NodeIdentity


def _load_config(ctx: click.Context, _param, path: Path | None) -> Path | None:
    """--config FILE: a TOML file whose keys are the options' names (data_dir, nats, replicas...);
    options given on the command line win."""
    if path is not None:
        try:
            doc = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise click.BadParameter(f"{path}: {exc}") from None
        ctx.default_map = {k.replace("-", "_"): v for k, v in doc.items()}
    return path


@click.group()
def node() -> None:
    """Run a dsonet node: its library, DeltaSoup, a transport and the HTTP API for agents.

    \b
    Example:
      dso cluster up && dso node start --nats nats://127.0.0.1:4222 --port 8080
    """


@node.command()
@click.option("--config", type=click.Path(dir_okay=False, exists=True, path_type=Path), callback=_load_config,
              is_eager=True, expose_value=False, help="TOML file with any of these options (names with _).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=HOME, show_default=True,
              help="Holds node.key (created on first start; what `dso keygen` writes) and "
                   "library.sqlite (what --db opens by default).")
@click.option("--nats", "nats_urls", default="", help="Comma-separated NATS urls; empty: a standalone node "
              "on an in-process log.")
@click.option("--nats-user", envvar="DSONET_NATS_USER", default=None,
              help="NATS user to log in as (env DSONET_NATS_USER): node-<id16>, printed by `dso cluster add-node`.")
@click.option("--nats-password-file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              envvar="DSONET_NATS_PASSWORD_FILE", default=None,
              help="File holding the user's password (env DSONET_NATS_PASSWORD_FILE); or put the password itself "
                   "in env DSONET_NATS_PASSWORD. Never on the command line.")
@click.option("--nats-tls-ca", type=click.Path(dir_okay=False, exists=True, path_type=Path), envvar="DSONET_NATS_TLS_CA",
              default=None, help="CA file to check the servers' certificates with (the cluster's tls/ca.pem); "
                                 "implies TLS, as tls:// urls do.")
@click.option("--nats-tls-cert", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              envvar="DSONET_NATS_TLS_CERT", default=None, help="Client certificate, for servers that demand one.")
@click.option("--nats-tls-key", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              envvar="DSONET_NATS_TLS_KEY", default=None, help="The client certificate's private key.")
@click.option("--stream", default="DSO", show_default=True, help="JetStream stream name.")
@click.option("--replicas", default=3, show_default=True, help="Stream replicas (one per site, at most 5).")
@click.option("--retention-days", default=30.0, show_default=True, help="How much history new nodes can replay.")
@click.option("--host", default="127.0.0.1", show_default=True, help="API address; beyond loopback needs --token.")
@click.option("--port", default=8080, show_default=True)
@token_option
@click.option("--batch-interval", default=60.0, show_default=True, help="Seconds between batches (the paper: 60).")
@click.option("--batch-size", default=10, show_default=True, help="Publish early once this many are new (paper: 10).")
@click.option("--encoder", default="default", show_default=True,
              help="Encoder spec: default (MiniLM + Zen head, 7680 dims), minilm, st:NAME, hf:NAME, zen:DIR, "
                   "or 'none' (clients send vectors).")
@click.option("--dim", type=int, default=None, help="Profile dimension; required with --encoder none.")
@click.option("--encoder-id", default="none", show_default=True, help="Names the space with --encoder none.")
@click.option("--encode-texts", is_flag=True,
              help="Encode peers' texts too and keep the floats on disk: exact search over their experiences "
                   "(recall@10 1.0 instead of ~0.93 from codes alone) for the encoder's time and 30 KB a row.")
@click.option("--rule", default="median", show_default=True,
              help="DeltaSoup admission rule: deltasoup (the paper's), median, trimmed_mean, geomedian, krum, mean.")
@click.option("--soup", multiple=True, metavar="KEY=VALUE", help="DeltaSoupConfig override, e.g. rate_limit=1000.")
@click.option("--max-body", type=click.IntRange(1024), default=1024 * 1024, show_default=True,
              help="Largest request body in bytes (larger: 413).")
@click.option("--log-level", default="INFO", show_default=True)
def start(data_dir: Path, nats_urls: str, nats_user: str | None, nats_password_file: Path | None,
          nats_tls_ca: Path | None, nats_tls_cert: Path | None, nats_tls_key: Path | None, stream: str, replicas: int,
          retention_days: float, host: str, port: int, token: str | None, batch_interval: float, batch_size: int,
          encoder: str, dim: int | None, encoder_id: str, encode_texts: bool, rule: str, soup: tuple[str, ...],
          max_body: int, log_level: str) -> None:
    """Start one node and serve its API until SIGTERM/Ctrl-C (pending experiences are published first).

    \b
    Examples:
      dso node start                                      standalone, http://127.0.0.1:8080/docs
                                                          (its page for people: http://127.0.0.1:8080/)
      dso node start --nats nats://a:4222,nats://b:4222 --host 0.0.0.0 --token $T
      dso node start --nats tls://a:4222 --nats-user node-3f2a9c0e11d4b7a8 \\
           --nats-password-file .nats/creds/node-3f2a9c0e11d4b7a8.password --nats-tls-ca .nats/tls/ca.pem
      curl -XPOST localhost:8080/experiences -H 'content-type: application/json' \\
           -d '{"text": "When a ratio is asked, simplify the fraction first.", "domain": "math"}'
    """
    import asyncio  # 37 modules that `dso node --help` and `dso cluster` need not load

    from dsonet.learn.context import system_text
    from dsonet.network.jetstream import NatsConfig
    from dsonet.network.node import NodeConfig
    from dsonet.network.server import serve_node

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not nats_urls and (nats_user or nats_password_file or nats_tls_ca or nats_tls_cert or nats_tls_key):
        raise click.UsageError("--nats-user, --nats-password-file and --nats-tls-* need --nats URLS")
    try:
        config = NodeConfig(
            data_dir=data_dir.expanduser(), encoder=None if encoder == "none" else encoder, dim=dim,
            encoder_id=encoder_id, batch_interval_s=batch_interval, batch_size=batch_size,
            soup=_parse_soup(soup), rule=rule, encode_texts=encode_texts,
        )
        nats = None
        if nats_urls:
            nats = NatsConfig(servers=[u.strip() for u in nats_urls.split(",") if u.strip()], stream=stream,
                              replicas=replicas, max_age_s=retention_days * 86400, user=nats_user,
                              password=_nats_password(nats_password_file), tls_ca=nats_tls_ca,
                              tls_cert=nats_tls_cert, tls_key=nats_tls_key)
    except DsoError as exc:
        raise click.ClickException(str(exc)) from None
    asyncio.run(serve_node(config, nats, host, port, token, max_body, system_text))  # `Dso` tells its errors


def _nats_password(path: Path | None) -> str | None:
    """From the file when one is given, else from DSONET_NATS_PASSWORD (secrets stay out of `ps`)."""
    if path is None:
        return os.environ.get("DSONET_NATS_PASSWORD") or None
    if path.stat().st_mode & 0o077:
        logging.getLogger(__name__).warning("%s can be read by others than its owner; chmod 600 it", path)
    password = path.read_text().strip()
    if not password:
        raise click.BadParameter(f"{path} is empty", param_hint="--nats-password-file")
    return password


def _parse_soup(pairs: tuple[str, ...]) -> dict:
    from dsonet.aggregate import DeltaSoupConfig

    known = {f.name for f in fields(DeltaSoupConfig)}
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in known:
            raise click.BadParameter(f"{pair!r}: expected KEY=VALUE with KEY one of {sorted(known)}", param_hint="--soup")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            raise click.BadParameter(f"{pair!r}: VALUE must be JSON (a number, true/false or null)",
                                     param_hint="--soup") from None
    return out


node.add_command(keys)  # the operator's commands (`dsonet.cli.operator`)
node.add_command(quarantine)


@click.group()
def cluster() -> None:
    """A NATS cluster with JetStream on this machine (three servers by default), for development and tests.

    \b
    Example:
      dso cluster up --state-dir .nats && dso cluster status --state-dir .nats && dso cluster down --state-dir .nats
    """


_state = click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=Path(".nats"),
                      show_default=True, help="Config files, pid files, logs and JetStream data.")


@cluster.command()
@_state
@click.option("--servers", "n", type=click.IntRange(1, 5), default=3, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address every server listens on (client, cluster routes, monitoring).")
@click.option("--client-port", type=click.IntRange(1, 65535), default=4222, show_default=True,
              help="Server i listens on client-port + i.")
@click.option("--cluster-port", type=click.IntRange(1, 65535), default=6222, show_default=True,
              help="Server i takes routes on cluster-port + i.")
@click.option("--http-port", type=click.IntRange(1, 65535), default=8222, show_default=True,
              help="Monitoring (/healthz) on http-port + i.")
@click.option("--open", "open_", is_flag=True,
              help="No users: anyone who reaches a port may publish, purge or delete (development on loopback only).")
@click.option("--tls", is_flag=True, help="TLS only, for clients and routes, with a private CA written to "
                                          "STATE_DIR/tls (nodes need its ca.pem: --nats-tls-ca).")
@click.option("--tls-verify", is_flag=True, help="--tls, and every client must also show a certificate from the "
                                                 "CA (mutual TLS): add-node writes one per node.")
@json_option
def up(state_dir: Path, n: int, host: str, client_port: int, cluster_port: int, http_port: int, open_: bool,
       tls: bool, tls_verify: bool, as_json: bool) -> None:
    """Write one nats-server config per server (STATE_DIR/n1.conf ...: listen addresses, JetStream
    store, cluster routes to the others), start the servers in the background and wait until
    JetStream is ready. For real sites, copy one config to each site and put the other sites'
    addresses in its `routes`.

    By default every client must log in: the admin user (password in STATE_DIR/creds/admin.password)
    creates the stream now and alone may purge or delete it; each node gets its own user from
    `dso cluster add-node`, allowed to publish, to read the stream and to manage its own consumer only.

    \b
    Examples:
      dso cluster up --client-port 14222
      dso cluster up --tls && dso cluster add-node --key a/node.key
      dso cluster up --host 0.0.0.0 && cat .nats/n1.conf
    """
    from dsonet.network import cluster as c
    from dsonet.network.cluster_spec import make_spec

    spec = c.up(make_spec(state_dir, n, client_port, cluster_port, http_port, host=host, auth=not open_, tls=tls,
                          tls_verify=tls_verify))
    configs = [str(spec.conf_path(s)) for s in spec.servers]
    admin = str(spec.creds.user(c.ADMIN).password_file) if spec.auth else None
    if as_json:
        click.echo(json.dumps({"urls": spec.urls, "configs": configs, "admin_password_file": admin,
                               "ca_file": str(spec.ca_file) if spec.tls else None}))
        return
    click.echo(f"{n} nats-servers up at {','.join(spec.urls)}\nconfigs: {' '.join(configs)}")
    if spec.auth:
        click.echo(f"stream {spec.stream} created by user admin (password in {admin})\n"
                   f"give each node its user: dso cluster add-node --state-dir {state_dir} --key DATA_DIR/node.key")
    else:
        click.echo("OPEN cluster: no users, any client may purge or delete the stream")
    if spec.tls:
        click.echo(f"TLS: nodes check the servers with --nats-tls-ca {spec.ca_file}"
                   + (" and show the client certificate add-node writes" if spec.tls_verify else ""))


def _node_id(node_id: str | None, key: Path | None) -> str:
    if (node_id is None) == (key is None):
        raise click.UsageError("give the node as --node-id HEX or as --key PATH (its node.key), one of them")
    if key is None:
        return node_id
    return NodeIdentity.load(key).node_id


_node_id_option = click.option("--node-id", default=None,
                               help="The node's id (64 hex digits, printed by `dso keygen`).")
_key_option = click.option("--key", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
                           help="The node's key file instead (DATA_DIR/node.key; `dso keygen DATA_DIR/node.key` "
                                "makes one).")


@cluster.command("add-node")
@_state
@_node_id_option
@_key_option
@json_option
def add_node(state_dir: Path, node_id: str | None, key: Path | None, as_json: bool) -> None:
    """Give a node its NATS user, node-<first 16 hex digits of its id>, with a new password in
    STATE_DIR/creds (mode 0600; the same one if it has a user already), and make the running
    servers load it. The user may publish batches and tombstones, read the stream, and create,
    read and pull only its own durable consumer; it may not purge or delete the stream, nor touch
    another node's consumer. Copy the password file to the node's machine.

    \b
    Examples:
      dso keygen a/node.key && dso cluster add-node --key a/node.key
      dso cluster add-node --node-id 3f2a9c0e11d4b7a8... --json
    """
    from dsonet.network import cluster as c
    from dsonet.network.cluster_spec import ClusterSpec

    spec = ClusterSpec.load(state_dir)
    creds = c.add_node(spec, _node_id(node_id, key))
    options = spec.node_options(creds)
    if as_json:
        click.echo(json.dumps({"user": creds.user, "password_file": str(creds.password_file),
                               "node_start_options": ["--nats", ",".join(spec.urls), *options]}))
        return
    click.echo(f"user {creds.user}, password in {creds.password_file}\n"
               f"dso node start --nats {','.join(spec.urls)} {' '.join(options)}")


@cluster.command("remove-node")
@_state
@_node_id_option
@_key_option
@json_option
def remove_node(state_dir: Path, node_id: str | None, key: Path | None, as_json: bool) -> None:
    """Revoke a node's NATS user (a stolen key, a retired node): the running servers reload and
    refuse its logins from then on. Its durable consumer stays for the admin to delete.

    \b
    Example:
      dso cluster remove-node --key a/node.key
    """
    from dsonet.network import cluster as c
    from dsonet.network.auth import durable_for
    from dsonet.network.cluster_spec import ClusterSpec

    spec = ClusterSpec.load(state_dir)
    node = _node_id(node_id, key)
    removed = c.remove_node(spec, node)
    if as_json:
        click.echo(json.dumps({"user": durable_for(node), "removed": removed}))
        return
    click.echo(f"user {durable_for(node)} {'removed' if removed else 'had no credentials'}")


@cluster.command()
@_state
@click.option("--remove", is_flag=True, help="Also delete the state dir (all stream data).")
@json_option
def down(state_dir: Path, remove: bool, as_json: bool) -> None:
    """Stop the servers started by `dso cluster up`.

    \b
    Example:
      dso cluster down --remove
    """
    from dsonet.network import cluster as c

    stopped = c.down(state_dir, remove)
    if as_json:
        click.echo(json.dumps({"stopped": stopped}))
        return
    click.echo(f"stopped {', '.join(stopped) or 'nothing (no server was running)'}")


@cluster.command()
@_state
@json_option
def status(state_dir: Path, as_json: bool) -> None:
    """Show each server's pid, url and readiness.

    \b
    Example:
      dso cluster status --json
    """
    from dsonet.network import cluster as c
    from dsonet.network.cluster_spec import ClusterSpec

    rows = c.status(ClusterSpec.load(state_dir))
    if as_json:
        click.echo(json.dumps(rows))
        return
    for row in rows:
        click.echo(f"{row['name']}  pid={row['pid']}  running={row['running']}  ready={row['ready']}  {row['url']}")
