"""Stage 6 of the pipeline: tested images to the people and machines that run them.

- `lockfile`: images.lock (stacks, bases, image IDs, provenance) and its drift check;
- `publish`, `referrers`, `signing`: pushing tested images and verifying their digests, the SBOM
  as an OCI referrer, offline signatures in cosign's format;
- `sbom`, `audit`: CycloneDX SBOMs read from built images, known vulnerabilities of their wheels;
- `export`, `slurm`: enroot squashfs, OCI bundles and SIF for Slurm, sbatch scripts;
- `doctor`, `hostfit`, `plan`: reading a node, which built image fits a host, and what a driver
  upgrade changes (the images CI must rebuild)."""
