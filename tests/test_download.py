"""Downloads that survive interruptions (helpers.download), offline: a server on 127.0.0.1 that honours
HTTP range requests, serves a small archive in Imagenette's layout, and can break off mid-transfer."""

import hashlib
import io
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from helpers import download


def _archive(images: int = 6) -> bytes:
    """A .tgz holding imagenette2-320/val/WNID/*.JPEG (random bytes: only the layout matters here)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for k in range(images):
            data = hashlib.sha256(str(k).encode()).digest() * 500  # 16 kB (the .tgz compresses it to well under 1 kB)
            info = tarfile.TarInfo(f"imagenette2-320/val/n0144076{k % 2}/img_{k}.JPEG")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class Server:
    """Serves one file at /file.tgz; `break_after` bytes (once) before the connection is cut; counts requests."""

    def __init__(self, payload: bytes, break_after: int | None = None, ranges: bool = True):
        self.payload, self.break_after, self.ranges, self.requests = payload, break_after, ranges, []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                asked = self.headers.get("Range")
                server.requests.append(asked)
                start = int(asked.split("=")[1].split("-")[0]) if asked and server.ranges else 0
                body = server.payload[start:]
                self.send_response(206 if start else 200)
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(server.payload) - 1}/{len(server.payload)}")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if server.break_after is not None:
                    cut, server.break_after = server.break_after, None
                    self.wfile.write(body[:cut])
                    self.wfile.flush()
                    self.connection.shutdown(2)  # the connection drops mid-transfer
                    return
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/file.tgz"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_an_interrupted_transfer_resumes_with_a_range_request(tmp_path):
    payload = _archive()
    md5 = hashlib.md5(payload).hexdigest()
    with Server(payload, break_after=len(payload) // 3) as server:
        with pytest.raises(RuntimeError, match="Run the same call again"):
            download.fetch(server.url, tmp_path / "a.tgz", md5=md5, progress=False)
        part = tmp_path / "a.tgz.part"
        assert 0 < part.stat().st_size < len(payload) and not (tmp_path / "a.tgz").exists()
        download.fetch(server.url, tmp_path / "a.tgz", md5=md5, progress=False)
    assert server.requests == [None, f"bytes={len(payload) // 3}-"]  # the second request asked only for the rest
    assert (tmp_path / "a.tgz").read_bytes() == payload and not part.exists()


def test_a_server_that_ignores_ranges_sends_the_whole_file_again(tmp_path):
    payload = _archive()
    (tmp_path / "a.tgz.part").write_bytes(payload[:1000])
    with Server(payload, ranges=False) as server:
        download.fetch(server.url, tmp_path / "a.tgz", md5=hashlib.md5(payload).hexdigest(), progress=False)
    assert (tmp_path / "a.tgz").read_bytes() == payload


def test_a_wrong_checksum_is_deleted_and_said(tmp_path):
    with Server(_archive()) as server:
        with pytest.raises(RuntimeError, match="md5 is wrong"):
            download.fetch(server.url, tmp_path / "a.tgz", md5="0" * 32, progress=False)
    assert not (tmp_path / "a.tgz").exists() and not (tmp_path / "a.tgz.part").exists()


def test_imagenette_folder_downloads_extracts_atomically_and_repairs_a_partial_folder(tmp_path):
    payload = _archive()
    md5 = hashlib.md5(payload).hexdigest()
    folder = tmp_path / "imagenette2-320"
    (folder / "val" / "n01440760").mkdir(parents=True)  # a half-extracted folder from an interrupted run
    (folder / "val" / "n01440760" / "img_0.JPEG").write_bytes(b"truncated")
    with Server(payload, break_after=len(payload) // 2) as server:
        with pytest.raises(RuntimeError, match="resumes"):
            download.imagenette_folder(tmp_path, url=server.url, md5=md5)
        assert not download.is_complete(folder)
        assert download.imagenette_folder(tmp_path, url=server.url, md5=md5) == folder
    assert download.is_complete(folder) and len(list((folder / "val").rglob("*.JPEG"))) == 6
    assert (folder / "val" / "n01440760" / "img_0.JPEG").stat().st_size == 16000  # repaired, not the stub
    assert not (tmp_path / "imagenette2-320.tgz").exists()  # the archive is not kept beside its contents
    assert [p.name for p in tmp_path.iterdir()] == ["imagenette2-320"]  # no staging folder left behind
    # complete: no network needed any more
    assert download.imagenette_folder(tmp_path, url="http://127.0.0.1:9/unreachable", md5=md5) == folder


def test_an_archive_with_another_layout_is_refused(tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("something_else/x.txt")
        tar.addfile(info, io.BytesIO(b""))
    (tmp_path / "a.tgz").write_bytes(buffer.getvalue())
    with pytest.raises(RuntimeError, match="one folder named imagenette2-320"):
        download.extract(tmp_path / "a.tgz", tmp_path / "imagenette2-320")
    assert not (tmp_path / "imagenette2-320").exists()
