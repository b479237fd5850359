"""The gateway service: REST for users, events onto Kafka."""

from __future__ import annotations

import sys

import uvicorn

from docsum_shared import telemetry

from . import logs
from .app import create_app
from .settings import ConfigError, load_settings


def main() -> None:
    try:
        settings, api_keys = load_settings()
    except ConfigError as exc:
        # One line, no traceback: `make up` shows it as the reason the gateway did not start.
        print(f"docsum-gateway: bad setting {exc.setting}: {exc.message}", file=sys.stderr)
        raise SystemExit(2) from None
    admin_key = [settings.admin_key.get_secret_value()] if settings.admin_key else []
    logs.configure(secrets=[*api_keys, *admin_key], log_format=settings.log_format)
    telemetry.setup("gateway", settings.trace_file)
    uvicorn.run(
        create_app(settings),
        host=settings.gateway_host,
        port=settings.gateway_port,
        log_config=None,
        ws_ping_interval=settings.progress_heartbeat_s,  # the progress WebSocket's heartbeat
    )


if __name__ == "__main__":
    main()
