"""The gateway service: REST for users, events onto Kafka."""

from __future__ import annotations

import logging

import uvicorn

from docsum_shared.settings import get_settings

from .app import create_app


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    settings = get_settings()
    uvicorn.run(create_app(settings), host=settings.gateway_host, port=settings.gateway_port, log_config=None)


if __name__ == "__main__":
    main()
