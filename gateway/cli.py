"""``chat-gateway``: serve | check | translate | demo | demo-backends | schema | reload."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import os
import sys
import urllib.error
import urllib.request
from typing import Any

import orjson
import yaml

from gateway.config import (
    GatewayConfig,
    check_structure,
    load_config,
    parse_config,
    read_config_file,
    retired_settings,
)
from gateway.dialects import DIALECTS, names
from gateway.errors import ConfigError, GatewayError
from gateway.runtime import unkept_references

__all__ = ["main"]


def _workers(value: str) -> int:
    if value == "auto":
        return os.cpu_count() or 1
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1, or auto")
    return n


def _version() -> str:
    try:
        return importlib.metadata.version("chat-gateway")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed: pip install . first)"


_FORMATS = ("json", "console")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="chat-gateway",
        description="A version-translating reverse proxy for AI chat apps: any chat frontend "
                    "talks to any chat backend.",
        epilog="Each command's flags: chat-gateway COMMAND --help.")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}",
                   help="print the installed version and exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser(
        "serve", help="run the gateway",
        description="Run the gateway on a config file. SIGHUP reloads the config; SIGTERM stops "
                    "accepting and lets in-flight streams finish (server.shutdown_grace).")
    s.add_argument("--config", required=True, metavar="FILE",
                   help="the YAML config file (required)")
    s.add_argument("--host",
                   help="address to listen on (default: the config's server.host, 127.0.0.1 "
                        "when unset)")
    s.add_argument("--port", type=int,
                   help="port to listen on (default: the config's server.port, 8080 when unset)")
    s.add_argument("--workers", type=_workers, default=1, metavar="N|auto",
                   help="worker processes sharing the port: a number, or auto for one per core "
                        "(default: %(default)s)")
    s.add_argument("--log-format", choices=_FORMATS,
                   help="json: one JSON object per line; console: for people (default: the "
                        "config's logging.format, json when unset)")
    s.add_argument("--loop", choices=("auto", "asyncio", "uvloop"),
                   help="the event loop: auto = uvloop when installed (default: the config's "
                        "server.loop, auto when unset)")

    c = sub.add_parser(
        "check", help="validate a config file",
        description="Validate a config file: print every problem with its YAML path (such as "
                    "routes[2].upstream) and exit 1, or print a summary and exit 0.")
    c.add_argument("--config", required=True, metavar="FILE",
                   help="the YAML config file (required)")
    c.add_argument("--no-env", action="store_true",
                   help="check the structure only, without reading the environment: a value "
                        "holding ${VAR} is accepted as it stands, so that CI can check a config "
                        "(a Kubernetes ConfigMap, say) without its secrets (default: off, "
                        "${VAR} is read from the environment and must fit where it stands)")

    t = sub.add_parser(
        "translate", help="translate one body from stdin to stdout, no server",
        description="Translate one request or response body, read from stdin, from one dialect "
                    "into another, and write it to stdout. No server, no network. Dialects: "
                    + "; ".join(f"{n}: {d.summary}" for n, d in DIALECTS.items()) + ".")
    dialects = ", ".join(names())
    t.add_argument("--from", dest="source", required=True, choices=names(),
                   metavar="DIALECT",
                   help=f"the dialect of the body on stdin: {dialects} (required)")
    t.add_argument("--to", dest="target", required=True, choices=names(),
                   metavar="DIALECT", help=f"the dialect to write: {dialects} (required)")
    kind = t.add_mutually_exclusive_group(required=True)
    kind.add_argument("--request", action="store_true",
                      help="the body is a client request (one of --request and --response is "
                           "required)")
    kind.add_argument("--response", action="store_true",
                      help="the body is an upstream's answer (one of --request and "
                           "--response is required)")
    t.add_argument("--stream", action="store_true",
                   help="with --request: ask the target for a streamed answer; with --response: "
                        "the body is a stream, translated chunk by chunk (default: off, a whole "
                        "body)")
    t.add_argument("--model",
                   help="with --request: the model to name in the translated request when "
                        "the body names none, for a target dialect that carries one "
                        "(default: none)")
    t.add_argument("--on-unsupported", choices=("reject", "drop"), default="reject",
                   help="what the target cannot carry (tools, images, reasoning): reject "
                        "(exit 1, as a route does) or drop (left out, listed on stderr) "
                        "(default: %(default)s)")

    d = sub.add_parser(
        "demo", help="the gateway plus one demo backend per dialect, printing curl commands",
        description="Start one demo backend per dialect (ports from 9001) and the gateway on "
                    "the built-in demo config (derived from the dialect registry), and print a "
                    "curl command for each route. Ctrl-C stops it.")
    d.add_argument("--config", metavar="FILE",
                   help="a config file to serve instead of the built-in demo config (the demo "
                        "backends start either way; default: the built-in one)")
    d.add_argument("--print-config", action="store_true",
                   help="print the built-in demo config as YAML and exit (default: run the demo)")
    d.add_argument("--log-format", choices=_FORMATS, default="console",
                   help="json: one JSON object per line; console: for people "
                        "(default: %(default)s)")

    b = sub.add_parser(
        "demo-backends", help="only the demo backends (one port per dialect, from 9001)",
        description="Run only the demo backends, one per dialect, on ports from 9001 in "
                    "registry order (as docker-compose.yml does). Ctrl-C stops them.")
    b.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default: %(default)s)")

    sub.add_parser(
        "schema", help="print the config's JSON Schema",
        description="Print the config file's JSON Schema (draft 2020-12), with a description "
                    "of every key, for editors and CI validators.")

    r = sub.add_parser(
        "reload", help="ask a running gateway to reload its config",
        description="Ask a running gateway to reload its config file (POST /admin/reload, as "
                    "kill -HUP does). A config that does not validate is refused and the running "
                    "one stays; the problems are printed.")
    r.add_argument("--url", default="http://127.0.0.1:8080",
                   help="the gateway's base URL; its admin endpoint answers loopback clients "
                        "only (default: %(default)s)")
    return p


def _print_problems(path: str, e: ConfigError) -> None:
    print(f"{path}: invalid config", file=sys.stderr)
    for where, what in e.problems:
        print(f"  {where or '(top)'}: {what}", file=sys.stderr)


def _load(path: str) -> GatewayConfig | None:
    try:
        return load_config(path)
    except ConfigError as e:
        _print_problems(path, e)
        return None


def _check(path: str, no_env: bool) -> int:
    try:
        configs = _configs_in(read_config_file(path))
    except ConfigError as e:
        _print_problems(path, e)
        return 1
    failed = False
    for name, data in configs:
        label = f"{path} ({name})" if name else path
        from_env: list[str] = []
        notes: list[tuple[str, str]] = []
        try:
            if no_env:
                from_env = check_structure(data)
            else:
                notes.extend(unkept_references(parse_config(data)))
        except ConfigError as e:
            _print_problems(label, e)
            failed = True
            continue
        print(f"{label}: ok ({len(data['routes'])} routes, {len(data['upstreams'])} upstreams)")
        for where, note in retired_settings(data):
            print(f"  warning: {where}: {note}")
        for where, note in notes:
            print(f"  note: {where}: {note}")
        if from_env:
            print(f"  not checked, read from the environment at load: {', '.join(from_env)}")
    return 1 if failed else 0


def _configs_in(data: Any) -> list[tuple[str, Any]]:
    """The configs to check in a file's YAML: the file itself, or, for a Kubernetes ConfigMap
    manifest (the way deploy/ ships the config), each of its ``*.yaml``/``*.yml`` entries."""
    if not (isinstance(data, dict) and data.get("kind") == "ConfigMap"
            and data.get("apiVersion") == "v1" and isinstance(data.get("data"), dict)):
        return [("", data)]
    configs: list[tuple[str, Any]] = []
    for key, text in data["data"].items():
        if not str(key).endswith((".yaml", ".yml")):
            continue
        try:
            configs.append((f"data.{key}", yaml.safe_load(str(text))))
        except yaml.YAMLError as e:
            raise ConfigError([(f"data.{key}", f"not valid YAML: {e}")]) from None
    if not configs:
        raise ConfigError([("data", "this ConfigMap has no *.yaml or *.yml entry")])
    return configs


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    match args.command:
        case "serve":
            config = _load(args.config)
            if config is None:
                return 1
            from gateway.server import loop_factory, run_server

            try:
                loop_factory(args.loop or config.server.loop)
            except RuntimeError as e:
                print(f"chat-gateway: {e}", file=sys.stderr)
                return 1
            try:
                return run_server(config, args.config, args.host or config.server.host,
                                  args.port if args.port is not None else config.server.port,
                                  args.workers, args.log_format, args.loop)
            except GatewayError as e:  # refused at start (a history schema it cannot use)
                print(f"cannot start: {e}", file=sys.stderr)
                return 1
        case "check":
            return _check(args.config, args.no_env)
        case "translate":
            from gateway.translate_cli import main_translate

            return main_translate(args.source, args.target, args.request, args.stream,
                                  args.model, args.on_unsupported)
        case "demo":
            if args.print_config:
                import yaml

                from gateway.demo import demo_config

                sys.stdout.write(yaml.safe_dump(demo_config(), sort_keys=False))
                return 0
            return _demo(args.config, args.log_format)
        case "demo-backends":
            return _demo_backends(args.host)
        case "schema":
            from gateway.schema import config_json_schema

            schema = config_json_schema()
            sys.stdout.write(orjson.dumps(schema, option=orjson.OPT_INDENT_2).decode() + "\n")
            return 0
        case "reload":
            return _reload(args.url)
    return 2


def _reload(url: str) -> int:
    req = urllib.request.Request(url.rstrip("/") + "/admin/reload", method="POST", data=b"")
    key = os.environ.get("CHAT_GATEWAY_KEY")
    if key:  # with auth.api_keys and no admin_port, the admin endpoints need a key
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            print(resp.read().decode())
            return 0
    except urllib.error.HTTPError as e:
        print(e.read().decode(), file=sys.stderr)
        return 1
    except OSError as e:
        print(f"cannot reach {url}: {e}", file=sys.stderr)
        return 1


def _demo(config_path: str | None, log_format: str) -> int:
    from gateway.demo import (
        curl_commands,
        demo_backends,
        demo_config,
        page_urls,
        start_demo_backends,
    )
    from gateway.log import configure_logging
    from gateway.server import serve_forever

    if config_path is None:
        try:
            config = parse_config(demo_config())
        except ConfigError as e:
            print(f"the built-in demo config is invalid: {e}", file=sys.stderr)
            return 1
    else:
        loaded = _load(config_path)
        if loaded is None:
            return 1
        config = loaded
    ports = sorted(p for p, _ in demo_backends().values())
    configure_logging(log_format, config.logging.level, stream=sys.stderr)
    base = f"http://{config.server.host}:{config.server.port}"

    async def run() -> None:
        runners = await start_demo_backends()
        ready = asyncio.Event()
        server = asyncio.create_task(serve_forever(
            config, config_path, config.server.host, config.server.port, on_ready=ready))
        ready_wait = asyncio.create_task(ready.wait())
        await asyncio.wait({server, ready_wait}, return_when=asyncio.FIRST_COMPLETED)
        if server.done():
            ready_wait.cancel()
            server.result()
        print(f"\nchat-gateway demo: gateway on {base}, demo backends on ports "
              f"{ports[0]}-{ports[-1]}.\n"
              f"Status page: {base}/   Metrics: {base}/metrics\n"
              + "".join(f"Chat page: {url}\n" for url in page_urls(base)) +
              "Paste any of these (Ctrl-C stops the demo):\n", flush=True)
        print("\n\n".join(curl_commands(config, base)) + "\n", flush=True)
        try:
            await server
        finally:
            for r in runners:
                await r.cleanup()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass
    except OSError as e:
        print(f"cannot start the demo: {e}", file=sys.stderr)
        return 1
    return 0


def _demo_backends(host: str) -> int:
    from gateway.demo import demo_backends, start_demo_backends

    async def run() -> None:
        runners = await start_demo_backends(host)
        listing = ", ".join(f"{port} {name} ({path})"
                            for name, (port, path) in demo_backends(host).items())
        print(f"demo backends on {host}: {listing}", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            for r in runners:
                await r.cleanup()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
