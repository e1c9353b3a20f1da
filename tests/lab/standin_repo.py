"""Build signed apt repositories and tarballs that STAND IN for vendor software the test lab cannot
reach: NVIDIA's libnvidia-container (Container Toolkit) repository, NVIDIA's CUDA repository (driver
meta packages), Docker's apt repository (docker-ce), and Hygon's hyhal driver layer and DTK tarballs.

    python3 tests/lab/standin_repo.py OUT_DIR

Nothing here is the vendors' software. The packages carry the vendors' names, versions and
dependencies, so apt, pinning, holds and signed-by keyrings are exercised for real; what they install
are small scripts: `nvidia-smi` and `hy-smi` print outputs captured on real machines
(tests/fixtures/hardware/: the H200 ones from the lent H200, the DCU ones from public reports), the
too-old driver prints the same capture with its driver/CUDA versions rewritten to 535.247.01 / 12.2,
and `nvidia-container-runtime` hands over to runc. The repositories are signed with a throwaway key
made for each build (OUT/.../gpgkey, OUT/.../3bf863cc.pub, the names NVIDIA serves its keys under).

Layout (paths as on the vendors' servers, served over http by the molecule scenarios):
    libnvidia-container/gpgkey
    libnvidia-container/stable/deb/amd64/      flat repository, 1.17.8-1 and 1.18.1-1
    compute/cuda/repos/debian12/x86_64/        flat repository, cuda-drivers-580 and cuda-drivers-535
    linux/debian/ (+ gpg)                      Docker's layout: docker-ce, docker-ce-cli (27.5.1, 28.5.2), containerd.io;
                                               docker-ce 27.5.1 carries Debian's docker.io (apt-get download, cached
                                               in OUT/../standin-sources)
    dcu/hyhal-standin.tar.gz, dcu/dtk-26.04-standin.tar.gz
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from llmfleet_testing import stand_in_script  # noqa: E402  pylint: disable=wrong-import-position

FIXTURES = ROOT / "tests" / "fixtures" / "hardware"
TOOLKIT_VERSIONS = ("1.17.8-1", "1.18.1-1")
DRIVERS = {"580": ("580.159.04", "13.0"), "535": ("535.247.01", "12.2")}
CAPTURED_DRIVER = ("580.159.04", "13.0")
DTK_VERSION = "26.04"
DOCKER_VERSIONS = ("5:27.5.1-1~debian.12~bookworm", "5:28.5.2-1~debian.12~bookworm")
NOTE = "Stand-in built by llmfleet.serving's test lab (tests/lab/standin_repo.py); not the vendor's software."


def captured(name: str) -> str:
    """A fixture without its '# source' lines (as the parsers' tests read them)."""
    return "\n".join(line for line in (FIXTURES / name).read_text().split("\n") if not line.startswith("# source"))


def build_deb(work: pathlib.Path, out: pathlib.Path, name: str, version: str, files: dict, depends: str = "",
              conflicts: str = "", description: str = "") -> pathlib.Path:
    """A real .deb (dpkg-deb) holding `files` (path -> (text, mode))."""
    tree = work / f"{name}_{version}"
    shutil.rmtree(tree, ignore_errors=True)
    (tree / "DEBIAN").mkdir(parents=True)
    control = [f"Package: {name}", f"Version: {version}", "Architecture: amd64", "Maintainer: llmfleet.serving test lab <lab@invalid>",
               "Section: misc", "Priority: optional"]
    if depends:
        control.append(f"Depends: {depends}")
    if conflicts:
        control += [f"Conflicts: {conflicts}", f"Replaces: {conflicts}"]
    control.append(f"Description: {description or name} (stand-in)\n {NOTE}")
    (tree / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
    for path, (text, mode) in files.items():
        target = tree / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        target.chmod(mode)
    deb = out / f"{name}_{version.split(':', 1)[-1]}_amd64.deb"  # pool names carry no epoch
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(deb)], check=True, stdout=subprocess.DEVNULL)
    return deb


def packages_index(debs: list, base: pathlib.Path, out_dir: pathlib.Path) -> None:
    """Packages and Packages.gz in out_dir for debs, their Filename relative to base."""
    entries = []
    for deb in sorted(debs):
        control = subprocess.run(["dpkg-deb", "-f", str(deb)], check=True, capture_output=True, text=True).stdout.rstrip("\n")
        data = deb.read_bytes()
        rel = deb.relative_to(base).as_posix()
        entries.append(control + f"\nFilename: {'./' + rel if base == out_dir else rel}\nSize: {len(data)}\n"
                                 f"MD5sum: {hashlib.md5(data).hexdigest()}\nSHA256: {hashlib.sha256(data).hexdigest()}\n")
    packages = "\n".join(entries).encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "Packages").write_bytes(packages)
    (out_dir / "Packages.gz").write_bytes(gzip.compress(packages, mtime=0))


def release(release_dir: pathlib.Path, indexes: list, gnupg: pathlib.Path, key_id: str, fields: tuple = ()) -> None:
    """Release (with the SHA256 of each index, paths relative to release_dir) and a clearsigned InRelease."""
    lines = ["Origin: llmfleet-standin", "Label: llmfleet-standin", *fields, "Architectures: amd64",
             "Date: " + time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime()), "SHA256:"]
    for path in indexes:
        data = path.read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {path.relative_to(release_dir).as_posix()}")
    (release_dir / "Release").write_text("\n".join(lines) + "\n")
    subprocess.run(["gpg", "--homedir", str(gnupg), "--batch", "--yes", "--local-user", key_id, "--clearsign",
                    "--output", str(release_dir / "InRelease"), str(release_dir / "Release")], check=True)


def index(repo: pathlib.Path, gnupg: pathlib.Path, key_id: str) -> None:
    """A flat repository (suite "/"), the layout NVIDIA's repositories use."""
    packages_index(list(repo.glob("*.deb")), repo, repo)
    release(repo, [repo / "Packages", repo / "Packages.gz"], gnupg, key_id)


def debian_docker_io(cache: pathlib.Path) -> pathlib.Path:
    """Debian's docker.io .deb (apt-get download, kept in cache): the engine the stand-in docker-ce carries."""
    cache.mkdir(parents=True, exist_ok=True)
    found = sorted(cache.glob("docker.io_*.deb"))
    if not found:
        if subprocess.run(["apt-get", "download", "docker.io"], cwd=cache, capture_output=True, check=False).returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], check=True)
            subprocess.run(["apt-get", "download", "docker.io"], cwd=cache, check=True, capture_output=True)
        found = sorted(cache.glob("docker.io_*.deb"))
    return found[-1]


def repackage_engine(work: pathlib.Path, pool: pathlib.Path, source: pathlib.Path, version: str) -> None:
    """docker-ce <version> holding Debian's docker.io files and maintainer scripts (daemon, CLI, unit), without
    docker.io's conflict with docker-ce; it depends on the stand-in docker-ce-cli and containerd.io like the real one."""
    tree = work / "docker-ce-engine"
    shutil.rmtree(tree, ignore_errors=True)
    subprocess.run(["dpkg-deb", "-R", str(source), str(tree)], check=True)
    control = (tree / "DEBIAN" / "control").read_text().splitlines()
    kept, skip = [], False
    for line in control:
        if line.startswith((" ", "\t")) and skip:
            continue
        skip = line.split(":", 1)[0] in ("Package", "Version", "Conflicts", "Replaces", "Provides", "Breaks", "Built-Using", "Source",
                                         "Description")
        if not skip and line.startswith("Depends:"):
            line += f", docker-ce-cli (= {version}), containerd.io"
        if not skip:
            kept.append(line)
    kept = ["Package: docker-ce", f"Version: {version}"] + kept + [
        f"Description: Docker CE engine (stand-in)\n {NOTE}\n Carries Debian's {source.name} (daemon and CLI) under Docker's package name."]
    (tree / "DEBIAN" / "control").write_text("\n".join(kept) + "\n")
    deb = pool / f"docker-ce_{version.split(':', 1)[-1]}_amd64.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "--build", str(tree), str(deb)], check=True, stdout=subprocess.DEVNULL)


def docker_repo(work: pathlib.Path, root: pathlib.Path, gnupg: pathlib.Path, key_id: str, cache: pathlib.Path) -> None:
    """Docker's layout (dists/bookworm/stable/binary-amd64, pool/stable/...): docker-ce and docker-ce-cli in two
    versions, containerd.io. The older docker-ce (the one the lab pins) carries Debian's docker.io engine; the
    newer one is listed only to prove that the pin, not "newest", decides."""
    pool = root / "pool" / "stable" / "amd64"
    pool.mkdir(parents=True)
    engine = debian_docker_io(cache)
    for version in DOCKER_VERSIONS:
        short = version.split(":", 1)[1].split("-", 1)[0]
        if version == DOCKER_VERSIONS[0]:
            repackage_engine(work, pool, engine, version)
        else:
            build_deb(work, pool, "docker-ce", version, {f"/usr/share/doc/docker-ce/STANDIN-{short}": (NOTE + "\n", 0o644)},
                      depends=f"docker-ce-cli (= {version}), containerd.io", description="Docker CE engine (listing only)")
        build_deb(work, pool, "docker-ce-cli", version, {f"/usr/share/doc/docker-ce-cli/STANDIN-{short}": (NOTE + "\n", 0o644)})
    build_deb(work, pool, "containerd.io", "1.7.27-1", {"/usr/share/doc/containerd.io/STANDIN": (NOTE + "\n", 0o644)})
    dist = root / "dists" / "bookworm"
    binary = dist / "stable" / "binary-amd64"
    packages_index(list(pool.glob("*.deb")), root, binary)
    release(dist, [binary / "Packages", binary / "Packages.gz"], gnupg, key_id,
            ("Suite: bookworm", "Codename: bookworm", "Components: stable"))


def make_key(gnupg: pathlib.Path) -> str:
    gnupg.mkdir(mode=0o700, parents=True)
    subprocess.run(["gpg", "--homedir", str(gnupg), "--batch", "--passphrase", "", "--quick-gen-key",
                    "llmfleet stand-in repository <lab@invalid>", "ed25519", "sign", "1d"], check=True, capture_output=True)
    listing = subprocess.run(["gpg", "--homedir", str(gnupg), "--batch", "--with-colons", "--list-keys"],
                             check=True, capture_output=True, text=True).stdout
    return next(line.split(":")[4] for line in listing.splitlines() if line.startswith("pub:"))


def export_key(gnupg: pathlib.Path, key_id: str, dest: pathlib.Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["gpg", "--homedir", str(gnupg), "--batch", "--armor", "--output", str(dest), "--yes", "--export", key_id], check=True)


def nvidia_smi_files(branch: str) -> dict:
    """nvidia-smi printing the H200 captures (versions rewritten for older branches)."""
    driver, cuda = DRIVERS[branch]
    raw = json.loads((FIXTURES / "h200x1-accelerator-facts" / "raw.json").read_text())["commands"]
    outputs = dict(raw)
    outputs["nvidia-smi"] = (FIXTURES / "h200x1" / "nvidia-smi.txt").read_text()
    data_dir = f"/usr/share/llmfleet-standin/nvidia-smi-{branch}"
    files, paths = {}, {}
    for i, (command, text) in enumerate(sorted(outputs.items())):
        text = text.replace(CAPTURED_DRIVER[0], driver).replace(f"CUDA Version: {CAPTURED_DRIVER[1]}", f"CUDA Version: {cuda}")
        text = text.replace(f"<cuda_version>{CAPTURED_DRIVER[1]}</cuda_version>", f"<cuda_version>{cuda}</cuda_version>")
        files[f"{data_dir}/{i}.txt"] = (text, 0o644)
        paths[command.split(" ", 1)[1] if " " in command else ""] = f"{data_dir}/{i}.txt"
    files["/usr/bin/nvidia-smi"] = (stand_in_script("nvidia-smi", paths), 0o755)
    return files


def toolkit_debs(work: pathlib.Path, repo: pathlib.Path) -> None:
    for version in TOOLKIT_VERSIONS:
        short = version.split("-", maxsplit=1)[0]
        ctk = ("#!/bin/sh\n# Stand-in for NVIDIA's nvidia-ctk (llmfleet.serving test lab).\n"
               f"case \"$1\" in --version|-v) echo 'NVIDIA Container Toolkit CLI version {short} (stand-in)' ;;\n"
               "  *) echo 'stand-in nvidia-ctk: only --version is implemented' >&2; exit 64 ;;\nesac\n")
        runtime = ("#!/bin/sh\n# Stand-in for NVIDIA's nvidia-container-runtime (llmfleet.serving test lab): there is no GPU\n"
                   "# to inject, so it hands the OCI call to runc unchanged.\nexec runc \"$@\"\n")
        build_deb(work, repo, "libnvidia-container1", version, {f"/usr/share/doc/libnvidia-container1/STANDIN-{short}": (NOTE + "\n", 0o644)})
        cli = f"#!/bin/sh\n# Stand-in for NVIDIA's nvidia-container-cli.\necho 'stand-in nvidia-container-cli {short}'\n"
        build_deb(work, repo, "libnvidia-container-tools", version, {"/usr/bin/nvidia-container-cli": (cli, 0o755)},
                  depends=f"libnvidia-container1 (= {version})")
        base_files = {"/usr/bin/nvidia-ctk": (ctk, 0o755), "/usr/bin/nvidia-container-runtime": (runtime, 0o755)}
        build_deb(work, repo, "nvidia-container-toolkit-base", version, base_files)
        build_deb(work, repo, "nvidia-container-toolkit", version, {"/usr/share/doc/nvidia-container-toolkit/STANDIN": (NOTE + "\n", 0o644)},
                  depends=f"nvidia-container-toolkit-base (= {version}), libnvidia-container-tools (= {version})")


def driver_debs(work: pathlib.Path, repo: pathlib.Path) -> None:
    for branch, (driver, _cuda) in DRIVERS.items():
        others = ", ".join(f"cuda-drivers-{b}" for b in DRIVERS if b != branch)
        build_deb(work, repo, f"cuda-drivers-{branch}", f"{driver}-1", nvidia_smi_files(branch), conflicts=others,
                  description=f"NVIDIA driver {driver} meta package")


def add_tar(tar: tarfile.TarFile, name: str, text: str, mode: int) -> None:
    info = tarfile.TarInfo(name)
    data = text.encode()
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


def dcu_tarballs(out: pathlib.Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    outputs = {"--showproductname": "hy-smi-a-cardseries-excerpt-k100ai-8x.txt",
               "--showmeminfo vram": "hy-smi-showmemavailable-k100ai-8x.txt", "--showtopo": "hy-smi-showtopo-8x-hcu-pcie.txt"}
    with tarfile.open(out / "hyhal-standin.tar.gz", "w:gz") as tar:
        paths = {}
        for i, (args, fixture) in enumerate(outputs.items()):
            add_tar(tar, f"hyhal/share/standin/{i}.txt", captured(fixture), 0o644)
            paths[args] = f"../share/standin/{i}.txt"   # beside bin/hy-smi, wherever hyhal is unpacked
        add_tar(tar, "hyhal/bin/hy-smi", stand_in_script("hy-smi", paths), 0o755)
        add_tar(tar, "hyhal/STANDIN", NOTE + "\n", 0o644)
    with tarfile.open(out / f"dtk-{DTK_VERSION}-standin.tar.gz", "w:gz") as tar:
        add_tar(tar, f"dtk-{DTK_VERSION}/env.sh", f"# Stand-in for the DTK environment script. {NOTE}\n"
                f"export ROCM_PATH=/opt/dtk-{DTK_VERSION}\nexport PATH=$ROCM_PATH/bin:$PATH\n", 0o644)
        add_tar(tar, f"dtk-{DTK_VERSION}/.info/version", f"{DTK_VERSION}\n", 0o644)


def main() -> int:
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / ".cache" / "standin-apt").resolve()
    started = time.time()
    # Empty it in place: a running stand-in server has this folder bind-mounted.
    out.mkdir(parents=True, exist_ok=True)
    for child in out.iterdir():
        shutil.rmtree(child) if child.is_dir() else child.unlink()
    toolkit = out / "libnvidia-container" / "stable" / "deb" / "amd64"
    cuda = out / "compute" / "cuda" / "repos" / "debian12" / "x86_64"
    for repo in (toolkit, cuda):
        repo.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        gnupg = work / "gnupg"
        key_id = make_key(gnupg)
        toolkit_debs(work, toolkit)
        driver_debs(work, cuda)
        for repo in (toolkit, cuda):
            index(repo, gnupg, key_id)
        export_key(gnupg, key_id, out / "libnvidia-container" / "gpgkey")
        export_key(gnupg, key_id, cuda / "3bf863cc.pub")
        docker = out / "linux" / "debian"
        docker_repo(work, docker, gnupg, key_id, out.parent / "standin-sources")
        export_key(gnupg, key_id, docker / "gpg")
        subprocess.run(["gpgconf", "--homedir", str(gnupg), "--kill", "all"], check=False)
    dcu_tarballs(out / "dcu")
    os.chmod(out, 0o755)
    count = len(list(out.rglob("*.deb")))
    print(f"[standin-repo] {count} stand-in packages, 3 signed repositories and 2 DCU tarballs in {out} "
          f"({time.time() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
