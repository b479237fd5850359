"""The whole pipeline in one process: `python -m docsum_pipeline`.

Every stage of the plan, run by the in-process runner, each with its settings read from the environment
as its service reads them; the gateway answers on DOCSUM_GATEWAY_HOST:DOCSUM_GATEWAY_PORT. One process
and one debugger for a document's whole way, from its upload to its task's end, on PostgreSQL and with
no broker. A deployment runs one stage per process on Kafka (`python -m docsum_<service>`).
"""

from __future__ import annotations

import asyncio
import logging
import sys

from docsum_gateway import logs as gateway_logs
from docsum_gateway.settings import ConfigError, GatewaySettings, check
from docsum_shared.consumer import run_service
from docsum_shared.settings import service_settings

from . import plan
from .inprocess import run_in_process

log = logging.getLogger(__name__)


async def _run(stop: asyncio.Event) -> None:
    settings = {stage.name: service_settings(stage.name, stage.settings) for stage in plan.stages()}
    gateway = settings["gateway"]
    assert isinstance(gateway, GatewaySettings)
    try:
        api_keys = check(gateway)
    except ConfigError as exc:
        print(f"docsum-pipeline: bad setting {exc.setting}: {exc.message}", file=sys.stderr)
        raise SystemExit(2) from None
    # The gateway's log lines, every stage's here: its keys never reach them (as `python -m docsum_gateway`).
    admin = [gateway.admin_key.get_secret_value()] if gateway.admin_key else []
    gateway_logs.configure(secrets=[*api_keys, *admin], log_format=gateway.log_format)
    host, port = gateway.gateway_host, gateway.gateway_port
    async with run_in_process(lambda stage: settings[stage.name], host=host, port=port) as running:
        log.info("the whole pipeline in this process; the gateway at %s", running.url)
        await stop.wait()


if __name__ == "__main__":
    run_service(_run)
