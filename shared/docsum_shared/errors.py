"""What failed, and whether trying again can help."""

from __future__ import annotations

import asyncio

import asyncpg
from aiokafka.errors import KafkaError

from .summarizers.base import RetriableLLMError


class PermanentError(Exception):
    """The message can never be handled as it is: it goes to the dead-letter topic."""


# Infrastructure that comes back by itself (a restarting broker or database, a busy provider):
# the consumer waits and tries the same message again instead of moving on or crashing.
RETRIABLE: tuple[type[BaseException], ...] = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.OperatorInterventionError,  # admin shutdown, cannot connect now: a restarting server
    asyncpg.TooManyConnectionsError,
    asyncpg.DeadlockDetectedError,
    asyncpg.SerializationError,
    KafkaError,
    RetriableLLMError,
)


def is_retriable(exc: BaseException) -> bool:
    return isinstance(exc, RETRIABLE)
