"""Command line entry point: `python -m apify_emulator` / the `apify-emulator` script.

Flags override APIFY_EMULATOR_* env vars, which override defaults. Runs one
uvicorn worker (state is in-process, so more workers would split it).
"""

from __future__ import annotations

import argparse
import logging
import sys

import uvicorn

from apify_emulator.app import create_app
from apify_emulator.config import EmulatorConfig

log = logging.getLogger("apify_emulator")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="apify-emulator", description=__doc__)
    parser.add_argument("--host", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default 8765; 0 = any free port)")
    parser.add_argument(
        "--token",
        action="append",
        dest="tokens",
        help="accepted API token (repeatable; '*' accepts any)",
    )
    parser.add_argument("--time-scale", type=float, help="multiplier on scripted durations")
    parser.add_argument("--state-file", help="sqlite file to keep state across restarts")
    parser.add_argument("--public-url", help="base URL used in Location headers")
    parser.add_argument("--max-concurrent-runs", type=int, help="402 above this (0 = off)")
    parser.add_argument("--max-total-memory-mbytes", type=int, help="402 above this (0 = off)")
    parser.add_argument("--rate-limit-rps", type=int, help="per-resource req/s (0 = off)")
    parser.add_argument(
        "--rate-limit-retry-after-secs",
        type=int,
        help="Retry-After seconds on rate-limit 429s (0 = none, as Apify documents none)",
    )
    parser.add_argument("--webhook-retry-base-secs", type=float, help="first retry delay")
    parser.add_argument("--log-level", help="DEBUG, INFO, WARNING ...")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if v is not None}
    if "tokens" in overrides:
        overrides["tokens"] = tuple(overrides["tokens"])
    cfg = EmulatorConfig.from_env(**overrides)
    logging.basicConfig(
        stream=sys.stderr,
        level=cfg.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    app = create_app(cfg)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=cfg.host,
            port=cfg.port,
            log_config=None,
            log_level=cfg.log_level.lower(),
            timeout_graceful_shutdown=2,
        )
    )
    log.info(
        "apify emulator listening on http://%s:%d (tokens: %d accepted)",
        cfg.host,
        cfg.port,
        len(cfg.tokens),
    )
    server.run()


if __name__ == "__main__":
    main()
