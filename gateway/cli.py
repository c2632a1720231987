"""``chat-gateway``: serve | check | translate | demo | demo-backends | schema | reload."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

import orjson

from gateway.config import GatewayConfig, load_config
from gateway.dialects import DIALECT_NAMES
from gateway.errors import ConfigError

__all__ = ["main"]


def _workers(value: str) -> int:
    if value == "auto":
        return os.cpu_count() or 1
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1, or auto")
    return n


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="chat-gateway",
                                description="A version-translating reverse proxy for AI chat apps.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the gateway")
    s.add_argument("--config", required=True, help="the YAML config file")
    s.add_argument("--host", help="overrides server.host")
    s.add_argument("--port", type=int, help="overrides server.port")
    s.add_argument("--workers", type=_workers, default=1,
                   help="worker processes sharing the port (a number, or auto = cores)")
    s.add_argument("--log-format", choices=("json", "console"), help="overrides logging.format")

    c = sub.add_parser("check", help="validate a config file")
    c.add_argument("--config", required=True)

    t = sub.add_parser("translate", help="translate one body from stdin to stdout")
    t.add_argument("--from", dest="source", required=True, choices=DIALECT_NAMES)
    t.add_argument("--to", dest="target", required=True, choices=DIALECT_NAMES)
    kind = t.add_mutually_exclusive_group(required=True)
    kind.add_argument("--request", action="store_true", help="a client request body")
    kind.add_argument("--response", action="store_true", help="an upstream response body")
    t.add_argument("--stream", action="store_true", help="a streamed request or response")
    t.add_argument("--model", help="the model for an openai target that names none")

    d = sub.add_parser("demo", help="the gateway on config/demo.yaml with demo backends")
    d.add_argument("--config", default="config/demo.yaml")
    d.add_argument("--log-format", choices=("json", "console"), default="console")

    b = sub.add_parser("demo-backends", help="only the demo backends (ports 9001-9004)")
    b.add_argument("--host", default="127.0.0.1")

    sub.add_parser("schema", help="print the config's JSON Schema")

    r = sub.add_parser("reload", help="ask a running gateway to reload its config")
    r.add_argument("--url", default="http://127.0.0.1:8080",
                   help="the gateway's base URL (its admin endpoint answers loopback only)")
    return p


def _load(path: str) -> GatewayConfig | None:
    try:
        return load_config(path)
    except ConfigError as e:
        print(f"{path}: invalid config", file=sys.stderr)
        for where, what in e.problems:
            print(f"  {where or '(top)'}: {what}", file=sys.stderr)
        return None


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    match args.command:
        case "serve":
            config = _load(args.config)
            if config is None:
                return 1
            from gateway.server import run_server

            return run_server(config, args.config, args.host or config.server.host,
                              args.port if args.port is not None else config.server.port,
                              args.workers, args.log_format)
        case "check":
            config = _load(args.config)
            if config is None:
                return 1
            print(f"{args.config}: ok ({len(config.routes)} routes, "
                  f"{len(config.upstreams)} upstreams)")
            return 0
        case "translate":
            from gateway.translate_cli import main_translate

            return main_translate(args.source, args.target, args.request, args.stream,
                                  args.model)
        case "demo":
            return _demo(args.config, args.log_format)
        case "demo-backends":
            return _demo_backends(args.host)
        case "schema":
            schema = GatewayConfig.model_json_schema()
            sys.stdout.write(orjson.dumps(schema, option=orjson.OPT_INDENT_2).decode() + "\n")
            return 0
        case "reload":
            return _reload(args.url)
    return 2


def _reload(url: str) -> int:
    req = urllib.request.Request(url.rstrip("/") + "/admin/reload", method="POST", data=b"")
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


_CURL = {
    "protocol-2024-05-29": [
        ("{p}", '{"messages":[{"role":"user","content":"What does the gateway do?"}],'
                '"sessionState":"s-1"}', ""),
        ("{p}/stream", '{"messages":[{"role":"user","content":"Stream it please"}],'
                       '"sessionState":"s-1"}', "-N "),
    ],
    "protocol-2024-01-28": [
        ("{p}", '{"messages":[{"role":"user","content":"Stream it please"}],"stream":true,'
                '"session_state":{"user":"u-1"}}', "-N "),
    ],
    "chatui": [
        ("{p}", '{"messages":[{"role":"user","content":"Stream it please"}]}',
         "-N -H 'Accept: text/event-stream' "),
    ],
    "openai": [
        ("{p}", '{"model":"demo-model","messages":[{"role":"user","content":"Stream it '
                'please"}],"stream":true}', "-N "),
        ("{p}", '{"model":"demo-model","messages":[{"role":"user","content":"Hi"}]}', ""),
    ],
}


def curl_commands(config: GatewayConfig, base: str) -> list[str]:
    out = []
    for route in config.routes:
        for path, body, flags in _CURL[route.dialect]:
            out.append(f"# {route.dialect} client -> {route.upstreams[0].name}\n"
                       f"curl {flags}-s {base}{path.format(p=route.path)} "
                       f"-H 'Content-Type: application/json' -d '{body}'")
    return out


def _demo(config_path: str, log_format: str) -> int:
    from gateway.demo import start_demo_backends
    from gateway.log import configure_logging
    from gateway.server import serve_forever

    if not Path(config_path).exists():
        print(f"{config_path} not found: run the demo from the repository root", file=sys.stderr)
        return 1
    config = _load(config_path)
    if config is None:
        return 1
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
        print(f"\nchat-gateway demo: gateway on {base}, demo backends on ports 9001-9004.\n"
              f"Status page: {base}/   Metrics: {base}/metrics\n"
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
    from gateway.demo import start_demo_backends

    async def run() -> None:
        runners = await start_demo_backends(host)
        print(f"demo backends on {host}: 9001 protocol-2024-01-28, 9002 protocol-2024-05-29, "
              "9003 chatui, 9004 openai", flush=True)
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
