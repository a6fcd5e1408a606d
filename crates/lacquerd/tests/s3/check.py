#!/usr/bin/env python3
"""The StorageGRID guide's setup on Lacquer against a real S3 server.

Starts MinIO (on a temporary directory, a free loopback port and
credentials of its own), a recording proxy in front of it (it logs every
request head Lacquer sends to the origin and counts the bytes the origin
answers with), and lacquerd with examples/storagegrid.vcl pointed at the
proxy and the guide's parameters (http_gzip_support=off, vsl_mask=+Hash).
Then drives it with the AWS CLI, boto3, s3cmd and rclone and checks:

- list, put, get (whole, ranged, presigned), head, delete and multipart
  upload through Lacquer, with each client;
- authorisation stays exact: wrong or no credentials get the origin's 403
  even for a cached object; a deleted object is gone at the next GET and
  an overwritten one is new;
- signed requests reach the origin byte-exact (Host with its port,
  Authorization, every x-amz-*, Range, a presigned URL's query), nothing
  added but If-None-Match/If-Modified-Since (and Varnish's X-Varnish,
  X-Forwarded-For, Via), no Accept-Encoding;
- 1,000 random ranges of a large object come back byte-identical (by
  hash) with the right Content-Range, and asking them again moves no body
  from the origin;
- x-hits (the VCL's kvstore counter) equals the number of 304
  revalidations since the last full fetch.

Usage: check.py MINIO LACQUERD VCL. Exits non-zero on the first failed
check, saying which and why; prints a summary with figures otherwise.
"""

import asyncio
import hashlib
import json
import os
import random
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import boto3
import botocore
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config

REGION = "us-east-1"
ALLOWED_ADDED = {"if-none-match", "if-modified-since", "x-varnish", "x-forwarded-for", "via"}


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    raise SystemExit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, timeout=30.0):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            fail(f"{what} exited with status {proc.returncode} before listening on {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    fail(f"{what} did not listen on port {port} within {timeout:.0f} s")


class Reader:
    """Buffered reads off a socket, for parsing response framing."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def fill(self):
        d = self.sock.recv(65536)
        if not d:
            raise EOFError
        self.buf += d

    def until(self, sep):
        while sep not in self.buf:
            self.fill()
        i = self.buf.index(sep) + len(sep)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def exactly(self, n):
        while len(self.buf) < n:
            self.fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def make_certs(d):
    """A test CA and a certificate it signs for 127.0.0.1 and localhost
    (with openssl): the origin's TLS, which the guide's VCL verifies
    (`.ssl_verify_peer`, `.ssl_verify_host`) against SSL_CERT_FILE."""
    ca_key, ca, key, csr, crt = (os.path.join(d, n) for n in
                                 ("ca.key", "ca.pem", "origin.key", "origin.csr", "origin.pem"))
    ext = os.path.join(d, "origin.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n")
    steps = [
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "2", "-subj", "/CN=Lacquer S3 test CA", "-keyout", ca_key, "-out", ca],
        ["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", csr],
        ["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
         "-days", "2", "-extfile", ext, "-out", crt],
    ]
    for cmd in steps:
        r = subprocess.run(cmd, capture_output=True)
        check(r.returncode == 0, f"{' '.join(cmd[:3])} failed: {r.stderr.decode(errors='replace')}")
    return ca, crt, key


class Recorder:
    """The origin as Lacquer sees it: a TLS endpoint (the guide's backend
    is HTTPS) that relays to MinIO, logs each request head (in wire order
    and case) and counts the bytes the origin sends back. It runs on
    asyncio in a thread of its own, so each TLS connection is driven by
    one event loop only."""

    def __init__(self, upstream_port, cert, key):
        self.upstream = upstream_port
        self.lock = threading.Lock()
        self.heads = []
        self.resp_bytes = 0
        self.ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ctx.load_cert_chain(cert, key)
        ready = threading.Event()
        threading.Thread(target=self.run, args=(ready,), daemon=True).start()
        check(ready.wait(10), "the recording TLS proxy did not start")

    def run(self, ready):
        loop = asyncio.new_event_loop()

        async def start():
            srv = await asyncio.start_server(self.conn, "127.0.0.1", 0, ssl=self.ctx,
                                             limit=1 << 20)
            self.port = srv.sockets[0].getsockname()[1]
            ready.set()
            await srv.serve_forever()

        loop.run_until_complete(start())

    async def pump_back(self, up_r, w):
        try:
            while True:
                d = await up_r.read(65536)
                if not d:
                    break
                with self.lock:
                    self.resp_bytes += len(d)
                w.write(d)
                await w.drain()
        except (OSError, ConnectionError):
            pass
        finally:
            w.close()

    async def conn(self, r, w):
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            w.close()
            return
        back = asyncio.ensure_future(self.pump_back(up_r, w))
        try:
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                lines = head[:-4].split(b"\r\n")
                method, target, _ = lines[0].split(b" ", 2)
                fields = []
                for line in lines[1:]:
                    k, v = line.split(b":", 1)
                    fields.append((k.decode(), v.strip().decode("latin-1")))
                with self.lock:
                    self.heads.append({"method": method.decode(), "target": target.decode(), "fields": fields})
                up_w.write(head)
                lower = {k.lower(): v for k, v in fields}
                if "chunked" in lower.get("transfer-encoding", "").lower():
                    while True:
                        size_line = await r.readuntil(b"\r\n")
                        up_w.write(size_line)
                        size = int(size_line.split(b";")[0], 16)
                        if size == 0:
                            while True:
                                t = await r.readuntil(b"\r\n")
                                up_w.write(t)
                                if t == b"\r\n":
                                    break
                            break
                        up_w.write(await r.readexactly(size + 2))
                        await up_w.drain()
                else:
                    n = int(lower.get("content-length", "0"))
                    while n > 0:
                        chunk = await r.readexactly(min(n, 65536))
                        up_w.write(chunk)
                        await up_w.drain()
                        n -= len(chunk)
                await up_w.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError,
                ConnectionError, ValueError):
            pass
        finally:
            try:
                up_w.write_eof()
            except OSError:
                pass
            await back

    def mark(self):
        with self.lock:
            return len(self.heads), self.resp_bytes

    def since(self, mark):
        with self.lock:
            return self.heads[mark[0]:], self.resp_bytes - mark[1]


class Setup:
    def __init__(self, minio, lacquerd, vcl_path):
        self.tmp = tempfile.mkdtemp(prefix="lacquer-s3-")
        self.procs = []
        self.access = "lacquer" + os.urandom(4).hex()
        self.secret = os.urandom(16).hex()
        mport, cport = free_port(), free_port()
        env = dict(os.environ, MINIO_ROOT_USER=self.access, MINIO_ROOT_PASSWORD=self.secret,
                   MINIO_BROWSER="off", MINIO_UPDATE="off")
        self.minio_log = open(os.path.join(self.tmp, "minio.log"), "wb")
        data = os.path.join(self.tmp, "data")
        os.mkdir(data)
        m = subprocess.Popen([minio, "server", "--quiet", "--address", f"127.0.0.1:{mport}",
                              "--console-address", f"127.0.0.1:{cport}", data],
                             env=env, stdout=self.minio_log, stderr=subprocess.STDOUT)
        self.procs.append(m)
        wait_port(mport, m, "minio")
        self.wait_live(mport, m)
        ca, cert, key = make_certs(self.tmp)
        self.origin = Recorder(mport, cert, key)
        vcl = open(vcl_path).read()
        check('.host = "127.0.0.1";' in vcl and '.port = "9000";' in vcl,
              f"{vcl_path} no longer names the backend 127.0.0.1:9000 this test rewrites")
        check(".ssl = 1;" in vcl and ".ssl_verify_host = 1;" in vcl,
              f"{vcl_path} no longer has the guide's backend TLS lines")
        vcl = vcl.replace('.port = "9000";', f'.port = "{self.origin.port}";')
        vpath = os.path.join(self.tmp, "storagegrid.vcl")
        open(vpath, "w").write(vcl)
        self.port = free_port()
        self.lq_log = open(os.path.join(self.tmp, "lacquerd.log"), "wb")
        lq = subprocess.Popen([lacquerd, "-F", "-a", f"127.0.0.1:{self.port}", "-f", vpath,
                               "-n", os.path.join(self.tmp, "lq"), "-s", "malloc,512m",
                               "-p", "http_gzip_support=off", "-p", "vsl_mask=+Hash"],
                              env=dict(os.environ, SSL_CERT_FILE=ca),
                              stdout=self.lq_log, stderr=subprocess.STDOUT)
        self.procs.append(lq)
        wait_port(self.port, lq, "lacquerd")
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def wait_live(self, port, proc):
        end = time.time() + 30
        while time.time() < end:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/minio/health/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if proc.poll() is not None:
                fail(f"minio exited with status {proc.returncode}")
            time.sleep(0.2)
        fail("minio did not become ready within 30 s")

    def close(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def client(self, secret=None):
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.access,
                            aws_secret_access_key=secret or self.secret, region_name=REGION,
                            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))

    def cli_env(self):
        # The endpoint is plain HTTP: a CA bundle from the environment is
        # of no use, and rclone's S3 client refuses to start with one.
        env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
        return dict(env, AWS_ACCESS_KEY_ID=self.access, AWS_SECRET_ACCESS_KEY=self.secret,
                    AWS_DEFAULT_REGION=REGION, AWS_CONFIG_FILE="/dev/null",
                    AWS_SHARED_CREDENTIALS_FILE="/dev/null",
                    RCLONE_CONFIG_LQ_TYPE="s3", RCLONE_CONFIG_LQ_PROVIDER="Minio",
                    RCLONE_CONFIG_LQ_ENDPOINT=self.endpoint, RCLONE_CONFIG_LQ_ACCESS_KEY_ID=self.access,
                    RCLONE_CONFIG_LQ_SECRET_ACCESS_KEY=self.secret, RCLONE_CONFIG_LQ_REGION=REGION,
                    RCLONE_CONFIG="/dev/null")

    def run(self, what, argv, stdin=None):
        p = subprocess.run(argv, env=self.cli_env(), input=stdin, capture_output=True, timeout=120)
        if p.returncode != 0:
            fail(f"{what}: {' '.join(argv)} exited {p.returncode}:\n{p.stdout.decode(errors='replace')}"
                 f"{p.stderr.decode(errors='replace')}")
        return p.stdout


def status_of(fn):
    try:
        fn()
        return 200
    except botocore.exceptions.ClientError as e:
        return e.response["ResponseMetadata"]["HTTPStatusCode"]


def sha(b):
    return hashlib.sha256(b).hexdigest()


def raw_request(port, method, target, fields):
    """Sends a request byte for byte as given; returns (status, headers, body)."""
    s = socket.create_connection(("127.0.0.1", port))
    head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields) + "\r\n"
    s.sendall(head.encode("latin-1"))
    r = Reader(s)
    h = r.until(b"\r\n\r\n").decode("latin-1").split("\r\n")
    status = int(h[0].split(" ")[1])
    hdrs = {}
    for line in h[1:]:
        if line:
            k, v = line.split(":", 1)
            hdrs[k.strip().lower()] = v.strip()
    body = r.exactly(int(hdrs.get("content-length", "0"))) if method != "HEAD" else b""
    s.close()
    return status, hdrs, body


def signed_fields(st, method, path, extra):
    """The header fields of a SigV4-signed request, in the order sent."""
    url = f"http://127.0.0.1:{st.port}{path}"
    req = AWSRequest(method=method, url=url, headers=dict(extra))
    creds = botocore.credentials.Credentials(st.access, st.secret)
    S3SigV4Auth(creds, "s3", REGION).add_auth(req)
    fields = [("Host", f"127.0.0.1:{st.port}")]
    fields += [(k, v) for k, v in req.headers.items() if k.lower() != "host"]
    return fields


def passthrough_checks(st, bucket, key, data):
    """Signed requests reach the origin as the client sent them."""
    summary = {}
    path = f"/{bucket}/{key}"
    cases = [
        ("whole", {"x-amz-request-payer": "requester", "X-Amz-Meta-Probe": "Keep Case"}),
        ("ranged", {"Range": "bytes=5-1004", "x-amz-checksum-mode": "ENABLED"}),
    ]
    for name, extra in cases:
        for attempt in range(2):
            fields = signed_fields(st, "GET", path, extra)
            mark = st.origin.mark()
            status, hdrs, body = raw_request(st.port, "GET", path, fields)
            want = data[5:1005] if "Range" in extra else data
            check(status == (206 if "Range" in extra else 200),
                  f"signed {name} GET #{attempt + 1}: status {status}")
            check(body == want, f"signed {name} GET #{attempt + 1}: body differs")
            heads, _ = st.origin.since(mark)
            check(len(heads) == 1, f"signed {name} GET: {len(heads)} origin requests, want 1")
            o = heads[0]
            check(o["target"] == path, f"signed {name} GET: origin URL {o['target']!r}, sent {path!r}")
            sent = {k.lower(): (k, v) for k, v in fields}
            got = {k.lower(): (k, v) for k, v in o["fields"]}
            for lk, (k, v) in sent.items():
                check(lk in got, f"signed {name} GET: {k} did not reach the origin")
                check(got[lk][1] == v, f"signed {name} GET: {k} reached the origin as {got[lk][1]!r}, sent {v!r}")
                if lk.startswith("x-amz-") or lk in ("authorization", "host", "range"):
                    check(got[lk][0] == k, f"signed {name} GET: {k} reached the origin spelt {got[lk][0]!r}")
            added = set(got) - set(sent)
            check(added <= ALLOWED_ADDED, f"signed {name} GET: origin request gained {sorted(added - ALLOWED_ADDED)}")
            check("accept-encoding" not in got, f"signed {name} GET: Accept-Encoding added")
            if attempt == 1:
                check("if-none-match" in added, f"signed {name} GET: the second one did not revalidate")
            summary[name] = sorted(added)
    # A presigned URL's query reaches the origin byte-exact, through the
    # cached object (hashed on the path alone).
    s3 = st.client()
    for attempt in range(2):
        url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=600)
        target = url[len(st.endpoint):]
        mark = st.origin.mark()
        status, hdrs, body = raw_request(st.port, "GET", target, [("Host", f"127.0.0.1:{st.port}")])
        check(status == 200 and body == data, f"presigned GET #{attempt + 1}: status {status}")
        heads, _ = st.origin.since(mark)
        check(len(heads) == 1 and heads[0]["target"] == target,
              f"presigned GET: origin saw {[h['target'] for h in heads]}, sent {target!r}")
    return summary


def x_hits_checks(st, bucket, key):
    """x-hits counts the 304s since the last full fetch."""
    s3 = st.client()
    body = os.urandom(300_000)
    s3.put_object(Bucket=bucket, Key=key, Body=body)
    mark = st.origin.mark()
    seen = []
    for _ in range(6):
        r = s3.get_object(Bucket=bucket, Key=key)
        check(r["Body"].read() == body, "x-hits object: body differs")
        seen.append(int(r["ResponseMetadata"]["HTTPHeaders"]["x-hits"]))
    heads, moved = st.origin.since(mark)
    cond = [h for h in heads if any(k.lower() == "if-none-match" for k, _ in h["fields"])]
    check(seen == list(range(6)), f"x-hits over six GETs: {seen}")
    check(len(cond) == seen[-1], f"{len(cond)} revalidations at the origin, x-hits {seen[-1]}")
    check(moved < len(body) + 6 * 4096, f"six GETs moved {moved} bytes from the origin (object {len(body)})")
    # An overwrite: the next GET is a full fetch, the count starts over.
    # Across a second boundary: revalidations carry If-Modified-Since
    # (as varnishd's) beside If-None-Match, and MinIO answers 304 to an
    # If-Modified-Since of the same second whatever the ETag says (RFC
    # 9110 has a server ignore it when If-None-Match is present).
    time.sleep(1.1)
    body2 = os.urandom(1000)
    s3.put_object(Bucket=bucket, Key=key, Body=body2)
    r = s3.get_object(Bucket=bucket, Key=key)
    check(r["Body"].read() == body2, "overwritten object: the old body came back")
    check(r["ResponseMetadata"]["HTTPHeaders"]["x-hits"] == "0", "x-hits after an overwrite")
    return seen


def range_checks(st, bucket, key, data, n=1000):
    """n random ranges, twice: byte-identical, right Content-Range; the
    second round moves no body from the origin."""
    s3 = st.client()
    rnd = random.Random(20)
    size = len(data)
    ranges = []
    for _ in range(n):
        a = rnd.randrange(size)
        b = min(size - 1, a + rnd.randrange(1, 32768))
        ranges.append((a, b))

    def one(ab):
        a, b = ab
        r = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={a}-{b}")
        got = r["Body"].read()
        h = r["ResponseMetadata"]["HTTPHeaders"]
        return (r["ResponseMetadata"]["HTTPStatusCode"], h.get("content-range"), sha(got), len(got))

    rounds = []
    for round_no in range(2):
        mark = st.origin.mark()
        t0 = time.time()
        with ThreadPoolExecutor(8) as ex:
            results = list(ex.map(one, ranges))
        elapsed = time.time() - t0
        heads, moved = st.origin.since(mark)
        for (a, b), (status, crange, digest, length) in zip(ranges, results):
            check(status == 206, f"range {a}-{b} (round {round_no + 1}): status {status}")
            check(crange == f"bytes {a}-{b}/{size}",
                  f"range {a}-{b} (round {round_no + 1}): Content-Range {crange!r}")
            check(length == b - a + 1 and digest == sha(data[a:b + 1]),
                  f"range {a}-{b} (round {round_no + 1}): body differs")
        rounds.append({"seconds": round(elapsed, 2), "origin_requests": len(heads), "origin_bytes": moved})
    body_bytes = sum(b - a + 1 for a, b in ranges)
    # Round two: only 304 heads from the origin (a few hundred bytes each).
    check(rounds[1]["origin_bytes"] < n * 1024 and rounds[1]["origin_bytes"] < body_bytes / 10,
          f"repeated ranges moved {rounds[1]['origin_bytes']} bytes from the origin ({body_bytes} of ranges)")
    return {"ranges": n, "range_bytes": body_bytes, "rounds": rounds}


def auth_checks(st, bucket, key, data):
    """Wrong or no credentials get the origin's 403, cached object or not."""
    s3 = st.client()
    check(s3.get_object(Bucket=bucket, Key=key)["Body"].read() == data, "auth object: body differs")
    bad = st.client(secret="wrong" + st.secret)
    check(status_of(lambda: bad.get_object(Bucket=bucket, Key=key)) == 403, "wrong credentials: not 403")
    check(status_of(lambda: bad.get_object(Bucket=bucket, Key=key, Range="bytes=0-9")) == 403,
          "wrong credentials, ranged: not 403")
    status, _, _ = raw_request(st.port, "GET", f"/{bucket}/{key}", [("Host", f"127.0.0.1:{st.port}")])
    check(status == 403, f"no credentials: status {status}")
    # A presigned URL for another key does not open this one.
    other = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "nope"}, ExpiresIn=600)
    q = other.split("?", 1)[1]
    status, _, _ = raw_request(st.port, "GET", f"/{bucket}/{key}?{q}", [("Host", f"127.0.0.1:{st.port}")])
    check(status == 403, f"presigned URL of another key: status {status}")
    # And the right credentials still get it afterwards.
    check(s3.get_object(Bucket=bucket, Key=key)["Body"].read() == data, "auth object after 403s: body differs")


def boto3_checks(st, bucket, tmp):
    s3 = st.client()
    s3.create_bucket(Bucket=bucket)
    small = os.urandom(10_000)
    s3.put_object(Bucket=bucket, Key="b/small", Body=small)
    check(s3.get_object(Bucket=bucket, Key="b/small")["Body"].read() == small, "boto3 get")
    r = s3.get_object(Bucket=bucket, Key="b/small", Range="bytes=100-199")
    check(r["Body"].read() == small[100:200] and r["ContentRange"] == "bytes 100-199/10000", "boto3 ranged get")
    h = s3.head_object(Bucket=bucket, Key="b/small")
    check(h["ContentLength"] == len(small), "boto3 head")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "b/small"}, ExpiresIn=600)
    with urllib.request.urlopen(url) as resp:
        check(resp.read() == small, "boto3 presigned get")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="b/")["Contents"]]
    check(keys == ["b/small"], f"boto3 list: {keys}")
    # Multipart: three parts, the first two of 5 MiB.
    parts_data = [os.urandom(5 << 20), os.urandom(5 << 20), os.urandom(1000)]
    up = s3.create_multipart_upload(Bucket=bucket, Key="b/multi")
    parts = []
    for i, p in enumerate(parts_data, 1):
        r = s3.upload_part(Bucket=bucket, Key="b/multi", UploadId=up["UploadId"], PartNumber=i, Body=p)
        parts.append({"ETag": r["ETag"], "PartNumber": i})
    s3.complete_multipart_upload(Bucket=bucket, Key="b/multi", UploadId=up["UploadId"],
                                 MultipartUpload={"Parts": parts})
    whole = b"".join(parts_data)
    check(s3.get_object(Bucket=bucket, Key="b/multi")["Body"].read() == whole, "boto3 multipart get")
    # Delete: gone at the next GET, cached or not.
    s3.delete_object(Bucket=bucket, Key="b/small")
    check(status_of(lambda: s3.get_object(Bucket=bucket, Key="b/small")) == 404, "boto3 deleted object still served")
    check(status_of(lambda: s3.get_object(Bucket=bucket, Key="b/small")) == 404, "boto3 deleted object served again")
    # Overwrite: new content at the next GET.
    s3.put_object(Bucket=bucket, Key="b/small", Body=b"new")
    check(s3.get_object(Bucket=bucket, Key="b/small")["Body"].read() == b"new", "boto3 overwritten object")
    return whole


def awscli_checks(st, bucket, tmp):
    ep = ["--endpoint-url", st.endpoint]
    f = os.path.join(tmp, "cli.bin")
    data = os.urandom(9 << 20)  # above the CLI's 8 MiB multipart threshold
    open(f, "wb").write(data)
    st.run("aws s3 cp (multipart put)", ["aws", *ep, "s3", "cp", f, f"s3://{bucket}/cli/big.bin"])
    out = os.path.join(tmp, "cli.out")
    # `aws s3 cp` downloads objects above its multipart threshold in
    # ranged parts carrying a signed If-Match, which a cache miss drops
    # (as varnishd does: conditional headers are not forwarded on a
    # fetch), so the origin refuses the signature; whole GETs and
    # smaller objects go through.
    for _ in range(2):
        st.run("aws s3api get-object", ["aws", *ep, "s3api", "get-object", "--bucket", bucket,
                                        "--key", "cli/big.bin", out])
        check(open(out, "rb").read() == data, "aws s3api get-object: file differs")
    small = os.urandom(1 << 20)
    open(f, "wb").write(small)
    st.run("aws s3 cp (put)", ["aws", *ep, "s3", "cp", f, f"s3://{bucket}/cli/small.bin"])
    st.run("aws s3 cp (get)", ["aws", *ep, "s3", "cp", f"s3://{bucket}/cli/small.bin", out])
    check(open(out, "rb").read() == small, "aws s3 cp get: file differs")
    ls = st.run("aws s3 ls", ["aws", *ep, "s3", "ls", f"s3://{bucket}/cli/"]).decode()
    check("big.bin" in ls, f"aws s3 ls: {ls!r}")
    head = json.loads(st.run("aws s3api head-object", ["aws", *ep, "s3api", "head-object",
                                                     "--bucket", bucket, "--key", "cli/big.bin"]))
    check(head["ContentLength"] == len(data), f"aws head-object: {head}")
    st.run("aws s3api get-object (ranged)", ["aws", *ep, "s3api", "get-object", "--bucket", bucket,
                                              "--key", "cli/big.bin", "--range", "bytes=1000-2999", out])
    check(open(out, "rb").read() == data[1000:3000], "aws ranged get-object: differs")
    url = st.run("aws s3 presign", ["aws", *ep, "s3", "presign", f"s3://{bucket}/cli/big.bin"]).decode().strip()
    with urllib.request.urlopen(url) as resp:
        check(resp.read() == data, "aws presigned get: differs")
    st.run("aws s3 rm", ["aws", *ep, "s3", "rm", f"s3://{bucket}/cli/big.bin"])
    p = subprocess.run(["aws", *ep, "s3", "cp", f"s3://{bucket}/cli/big.bin", out], env=st.cli_env(),
                       capture_output=True)
    check(p.returncode != 0 and b"404" in p.stderr, f"aws get after rm: {p.returncode} {p.stderr!r}")


def s3cmd_checks(st, bucket, tmp):
    host = f"127.0.0.1:{st.port}"
    base = ["s3cmd", "--no-ssl", f"--host={host}", f"--host-bucket={host}", f"--access_key={st.access}",
            f"--secret_key={st.secret}", f"--region={REGION}", "--config=/dev/null", "--no-check-md5"]
    f = os.path.join(tmp, "s3cmd.bin")
    data = os.urandom(6 << 20)  # s3cmd's multipart chunks are 15 MiB: use 5
    open(f, "wb").write(data)
    st.run("s3cmd put (multipart)", [*base, "--multipart-chunk-size-mb=5", "put", f, f"s3://{bucket}/s3cmd/o.bin"])
    out = os.path.join(tmp, "s3cmd.out")
    for _ in range(2):
        st.run("s3cmd get", [*base, "--force", "get", f"s3://{bucket}/s3cmd/o.bin", out])
        check(open(out, "rb").read() == data, "s3cmd get: differs")
    ls = st.run("s3cmd ls", [*base, "ls", f"s3://{bucket}/s3cmd/"]).decode()
    check("o.bin" in ls, f"s3cmd ls: {ls!r}")
    info = st.run("s3cmd info", [*base, "info", f"s3://{bucket}/s3cmd/o.bin"]).decode()
    check(re.search(r"File size:\s*%d" % len(data), info) is not None, f"s3cmd info: {info!r}")
    st.run("s3cmd del", [*base, "del", f"s3://{bucket}/s3cmd/o.bin"])
    p = subprocess.run([*base, "--force", "get", f"s3://{bucket}/s3cmd/o.bin", out], env=st.cli_env(),
                       capture_output=True)
    check(p.returncode != 0, "s3cmd get after del succeeded")


def rclone_checks(st, bucket, tmp):
    f = os.path.join(tmp, "rclone.bin")
    data = os.urandom(6 << 20)
    open(f, "wb").write(data)
    # The guide's VCL turns every origin error but 404 into Varnish's own
    # error page, so rclone cannot read the BucketAlreadyOwnedByYou it
    # would ignore when it creates the bucket first: it is told not to.
    rc = ["rclone", "--s3-no-check-bucket", "--s3-upload-cutoff=5M", "--s3-chunk-size=5M", "--retries=1", "--low-level-retries=1"]
    st.run("rclone copyto (multipart)", [*rc, "copyto", f, f"lq:{bucket}/rclone/o.bin"])
    for _ in range(2):
        got = st.run("rclone cat", [*rc, "cat", f"lq:{bucket}/rclone/o.bin"])
        check(got == data, "rclone cat: differs")
    got = st.run("rclone cat (ranged)", [*rc, "cat", "--offset=4096", "--count=1000", f"lq:{bucket}/rclone/o.bin"])
    check(got == data[4096:5096], "rclone ranged cat: differs")
    ls = st.run("rclone lsl", [*rc, "lsl", f"lq:{bucket}/rclone"]).decode()
    check(str(len(data)) in ls and "o.bin" in ls, f"rclone lsl: {ls!r}")
    st.run("rclone deletefile", [*rc, "deletefile", f"lq:{bucket}/rclone/o.bin"])
    # rclone takes a missing source for an empty selection (exit 0).
    got = st.run("rclone cat (deleted)", [*rc, "cat", f"lq:{bucket}/rclone/o.bin"])
    check(got == b"", f"rclone cat after deletefile: {len(got)} bytes")
    ls = st.run("rclone lsf", [*rc, "lsf", f"lq:{bucket}/rclone"]).decode()
    check("o.bin" not in ls, f"rclone lsf after deletefile: {ls!r}")


def main():
    if len(sys.argv) != 4:
        fail("usage: check.py MINIO LACQUERD VCL")
    minio, lacquerd, vcl = sys.argv[1:]
    t0 = time.time()
    st = Setup(minio, lacquerd, vcl)
    work = tempfile.mkdtemp(prefix="lacquer-s3-files-")
    try:
        bucket = "storagegrid"
        phases = {"setup": round(time.time() - t0, 1)}

        def timed(name, fn, *args):
            t = time.time()
            r = fn(*args)
            phases[name] = round(time.time() - t, 1)
            return r

        timed("boto3", boto3_checks, st, bucket, work)
        timed("awscli", awscli_checks, st, bucket, work)
        timed("s3cmd", s3cmd_checks, st, bucket, work)
        timed("rclone", rclone_checks, st, bucket, work)
        s3 = st.client()
        small = os.urandom(4000)
        s3.put_object(Bucket=bucket, Key="pass/through", Body=small)
        passthrough = timed("passthrough", passthrough_checks, st, bucket, "pass/through", small)
        timed("auth", auth_checks, st, bucket, "pass/through", small)
        hits = timed("x_hits", x_hits_checks, st, bucket, "hits/object")
        large = os.urandom(8 << 20)
        s3.put_object(Bucket=bucket, Key="large/object", Body=large)
        ranges = timed("ranges", range_checks, st, bucket, "large/object", large)
        print(json.dumps({"ok": True, "seconds": round(time.time() - t0, 1), "phases": phases, "x_hits": hits,
                          "added_at_origin": passthrough, "ranges": ranges}), flush=True)
    except SystemExit:
        for name in ("lacquerd.log", "minio.log"):
            p = os.path.join(st.tmp, name)
            if os.path.exists(p):
                print(f"--- {name} (tail) ---\n" + open(p, errors="replace").read()[-3000:])
        raise
    finally:
        st.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
