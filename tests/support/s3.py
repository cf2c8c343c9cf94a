"""A local S3 API (moto's threaded server) with one bucket, for the tests that read and write
`s3://` URIs through pyarrow's S3 filesystem, as a bucket archive would be."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow.fs as pafs
import pytest


@contextmanager
def moto_bucket(bucket: str) -> Iterator[tuple[str, pafs.S3FileSystem]]:
    """(endpoint host:port, S3FileSystem) of a fresh moto server holding `bucket`; fake
    credentials in the environment only while it runs."""
    from moto.server import ThreadedMotoServer

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            endpoint = f"{host}:{port}"
            fs = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", allow_bucket_creation=True)
            fs.create_dir(bucket)
            yield endpoint, fs
        finally:
            server.stop()


def bucket_uri(bucket: str, endpoint: str, path: str) -> str:
    """An s3:// URI with the credentials and endpoint in it, as a user would pass one."""
    return f"s3://testing:testing@{bucket}/{path}?endpoint_override={endpoint}&scheme=http"
