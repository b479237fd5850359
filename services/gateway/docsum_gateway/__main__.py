"""The gateway service: REST for users, events onto Kafka."""

from __future__ import annotations

import sys

import uvicorn

from docsum_shared import heap, telemetry
from docsum_shared.health import listen

from . import logs
from .app import create_app, server
from .settings import ConfigError, load_settings


def main() -> None:
    try:
        settings, api_keys = load_settings()
    except ConfigError as exc:
        # One line, no traceback: `make up` shows it as the reason the gateway did not start.
        print(f"docsum-gateway: bad setting {exc.setting}: {exc.message}", file=sys.stderr)
        raise SystemExit(2) from None
    # Both ports are bound first: a taken one stops the gateway with one line naming its setting.
    api_socket = listen(settings.gateway_host, settings.gateway_port, "DOCSUM_GATEWAY_PORT", "gateway")
    health_socket = (
        listen(settings.health_host, settings.health_port, "DOCSUM_HEALTH_PORT", "gateway")
        if settings.health_port is not None
        else None
    )
    admin_key = [settings.admin_key.get_secret_value()] if settings.admin_key else []
    logs.configure(secrets=[*api_keys, *admin_key], log_format=settings.log_format)
    telemetry.setup("gateway", settings.trace_file)
    config = server(settings, create_app(settings, health_socket), loop="uvloop")  # uvloop: as every service's
    heap.freeze_imports()
    uvicorn.Server(config).run(sockets=[api_socket])


if __name__ == "__main__":
    main()
