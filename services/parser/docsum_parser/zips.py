"""What a zip archive holds, read without inflating it: how a DOCX is recognized and first checked."""

from __future__ import annotations

import io
import zipfile


def zip_members(data: bytes) -> dict[str, int] | None:
    """Member name -> declared uncompressed size, or None if this is not a readable zip."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return {info.filename: info.file_size for info in archive.infolist()}
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError):
        return None
