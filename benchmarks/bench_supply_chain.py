#!/usr/bin/env python3
"""What the SBOM referrer and the offline signature add to `imagebuild publish`, against the push
of the image itself, measured in the same run on a private registry.

    python benchmarks/bench_supply_chain.py [--image ID] [--repeat R]

Starts Debian's docker-registry (distribution 2.8, htpasswd auth) on a free loopback port with its
storage in a temporary folder, then for one matrix image that is built (default smoke-cpu):

- anchor: the push of the image's tags as `imagebuild publish` does it (publish.publish_image; the
  registry is empty, so every layer goes over);
- the image's SBOM generated from the built image (sbom.generate, as `imagebuild sbom`);
- attaching it as a referrer (blobs, manifest, the referrers tag schema's index, the read-back);
- signing the image and the SBOM referrer (ECDSA P-256, cosign's format, read back and verified);
- the same attach and sign again (nothing new is pushed: what a second publish pays);
- `imagebuild verify`'s work (signature and SBOM referrers, their signatures) and
  `imagebuild sbom --from-registry`'s (the referrer and its blob).

Each step after the anchor is the median of R runs, except the first attach and sign (once). Prints
seconds and the ratio to the anchor. Needs the engine in DOCKER_HOST, docker-registry and htpasswd.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imagebuild.deliver import publish, referrers, sbom, signing  # noqa: E402
from imagebuild.engines import connect, get_engine  # noqa: E402
from imagebuild.render.images import load_images  # noqa: E402
from imagebuild.render.run import MatrixRun  # noqa: E402


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def start_registry(root: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    htpasswd = subprocess.run(["htpasswd", "-Bbn", "bench", "bench-pw"], check=True, capture_output=True,
                              text=True).stdout
    (root / "htpasswd").write_text(htpasswd)
    (root / "config.yml").write_text(
        f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\nauth:\n  htpasswd:\n    realm: bench\n    path: {root / 'htpasswd'}\n")
    proc = subprocess.Popen(["docker-registry", "serve", str(root / "config.yml")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    host = f"127.0.0.1:{port}"
    api = publish.RegistryAPI(host, None, backoff=0.05)
    for _ in range(100):
        try:
            api.session.get(f"http://{host}/v2/", timeout=1)
            break
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.1)
    return proc, host


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", default="smoke-cpu")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for tool in ("docker-registry", "htpasswd"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not on PATH")
    from cryptography.hazmat.primitives.asymmetric import ec

    spec = load_images(ROOT / "matrix.yaml")[args.image]
    client = connect()
    image = client.images.get(spec.local_ref)
    creds = publish.Credentials("bench", "bench-pw")
    key = signing.SigningKey(ec.generate_private_key(ec.SECP256R1()), "bench")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-supply-") as tmp:
        proc, host = start_registry(Path(tmp))
        try:
            target = publish.parse_target(f"{host}/bench")
            api = publish.RegistryAPI(host, creds, backoff=0.05)
            repo, reference = target.repository(args.image), target.reference(args.image)
            anchor, result = timed(lambda: publish.publish_image(
                client, image_id=args.image, local_ref=spec.local_ref, tags=list(spec.tags), target=target,
                report={"image_id": image.id, "passed": True}, credentials=creds, api=api))
            digest = result.digest
            rows.append(("anchor: push of the image's tags (publish_image)", anchor))
            run = MatrixRun.open(ROOT / "matrix.yaml")
            generated = [timed(lambda: sbom.generate(get_engine(), run=run, image=args.image))
                         for _ in range(args.repeat)]
            doc = generated[-1][1].text.encode()
            rows.append((f"SBOM generated from the image ({len(doc):,} bytes)",
                         statistics.median(t for t, _ in generated)))
            subject = referrers.subject_of(api, repo, digest)
            t, attached = timed(lambda: referrers.attach_sbom(api, repo, subject, doc, image_id=args.image))
            rows.append(("attach the SBOM referrer, first time (tag schema)", t))
            t, _ = timed(lambda: (signing.sign(api, repo, docker_reference=reference, digest=digest, key=key),
                                  signing.sign(api, repo, docker_reference=reference, digest=attached.digest,
                                               key=key)))
            rows.append(("sign image + SBOM referrer, first time", t))
            again = [timed(lambda: referrers.attach_sbom(api, repo, subject, doc, image_id=args.image))[0]
                     for _ in range(args.repeat)]
            rows.append(("attach again (already listed)", statistics.median(again)))
            resign = [timed(lambda: signing.sign(api, repo, docker_reference=reference, digest=digest, key=key))[0]
                      for _ in range(args.repeat)]
            rows.append(("sign the image again (already signed)", statistics.median(resign)))

            def verify():
                signing.verify_signature(api, repo, digest, key.public_key)
                for entry in referrers.sbom_referrers(api, repo, digest)[0]:
                    signing.verify_signature(api, repo, entry["digest"], key.public_key)
            rows.append(("verify: signature + signed SBOM referrer",
                         statistics.median(timed(verify)[0] for _ in range(args.repeat))))
            fetched = [timed(lambda: referrers.fetch_sbom(api, repo, digest)) for _ in range(args.repeat)]
            assert fetched[0][1][1] == doc
            rows.append(("sbom --from-registry: referrer + blob, byte-identical",
                         statistics.median(t for t, _ in fetched)))
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            for tag in spec.tags:
                try:
                    client.images.remove(f"{target.reference(args.image)}:{tag}")
                except Exception:  # noqa: BLE001 - best effort
                    pass
    print(f"image {args.image} ({image.attrs.get('Size', 0) / 1e6:,.0f} MB), median of {args.repeat}")
    for label, seconds in rows:
        print(f"{label:<58} {seconds:8.3f} s  x {seconds / anchor:7.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
