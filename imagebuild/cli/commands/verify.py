"""`imagebuild verify REF --key PUBKEY [--require-sbom] [--auth-host HOST]`

Checks that the manifest REF names *now* (a tag is read as the registry serves it at this moment)
carries a signature made with the key's private half for exactly that digest, in cosign's key-based
format (imagebuild/deliver/signing.py), and reports its SBOM referrers and whether they are signed too.

One line, and the exit code: 0 verified; 1 no signature, a bad or tampered one, one made for
another digest (a re-pointed tag), no such manifest, or with --require-sbom no signed SBOM;
2 a bad reference or key file, credentials refused; 3 the registry cannot be reached.
"""

from __future__ import annotations

from ..reporter import Reporter


def configure(parser) -> None:
    from .. import add_timeout_option

    add_timeout_option(parser)
    parser.add_argument("ref", metavar="REF",
                        help="HOST[:PORT]/NAMESPACE/NAME:TAG or HOST[:PORT]/NAMESPACE/NAME@sha256:...")
    parser.add_argument("--key", required=True, metavar="PUBKEY",
                        help="the ECDSA P-256 public key (PEM, as cosign.pub) whose private half signed")
    parser.add_argument("--require-sbom", action="store_true",
                        help="also fail unless a CycloneDX SBOM referrer signed with the key is attached")
    parser.add_argument("--auth-host", action="append", default=[], metavar="HOST",
                        help="a host other than the registry's whose token service may receive the "
                             "registry credentials; repeatable")
    parser.add_argument("--json", action="store_true",
                        help="print the verified digest, key and SBOM referrers as JSON")


def run(args) -> int:
    from ...deliver import publish, referrers, signing

    ref = referrers.parse_reference(args.ref)
    public_key = signing.load_public_key(args.key)
    api = publish.RegistryAPI(ref.host, publish.find_credentials(ref.host), auth_hosts=args.auth_host, deadline=args.timeout)
    manifest = referrers.resolve(api, ref)
    verified = signing.verify_signature(api, ref.repository, manifest.digest, public_key)
    sboms, _where = referrers.sbom_referrers(api, ref.repository, manifest.digest)
    signed = []
    refused = 0
    for entry in sboms[:referrers.MAX_SBOM_REFERRERS]:
        # a referrer counts once its bytes are fetched and hashed, its subject is the manifest
        # verified here (not another image's), its SBOM blob matches its digest, and the
        # signature over that digest verifies: a listing or a signature tag alone vouches for nothing
        try:
            referrers.fetch_sbom(api, ref.repository, manifest.digest, referrer=entry["digest"])
            signing.verify_signature(api, ref.repository, entry["digest"], public_key)
            signed.append(entry["digest"])
        except publish.RegistryUnavailable:
            raise
        except (signing.VerificationFailed, referrers.NoReferrer, publish.RegistryError):
            refused += 1
    if args.require_sbom and not signed:
        raise signing.VerificationFailed(
            f"{ref.name}@{manifest.digest}: signature verified, but no SBOM referrer signed with key "
            f"{verified.key_id} for this manifest ({len(sboms)} SBOM referrer(s) listed, {refused} refused: not "
            "served intact, made for another subject, or not signed with this key)")
    if signed:
        sbom_text = f"SBOM {signed[0]} signed" + (f" (+{len(signed) - 1} more)" if len(signed) > 1 else "")
    elif sboms:
        sbom_text = (f"{len(sboms)} SBOM referrer(s), none signed with this key for this image"
                     + (f" ({refused} not served intact, for another subject, or unsigned)" if refused else ""))
    else:
        sbom_text = "no SBOM referrer"
    shown = str(ref) if ref.digest else f"{ref} ({manifest.digest})"
    identity = "" if verified.identity == ref.name else f", signed as {verified.identity}"
    Reporter.for_args("verify", args).result(
        {"reference": str(ref), "digest": manifest.digest, "verified": True, "key_id": verified.key_id,
         "identity": verified.identity, "signature_tag": verified.tag, "sbom_referrers": [entry["digest"] for entry in sboms],
         "signed_sboms": signed},
        f"verified {shown}: signed with key {verified.key_id}{identity}; {sbom_text}")
    return 0
