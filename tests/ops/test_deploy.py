"""deploy/: the Kubernetes manifest and the Dockerfile agree with ostinato-server (they are not
built or applied here; these checks catch a config or flag that ostinato-server would refuse)."""

import json
import pathlib
import re
import sys

import pytest

from ostinato import server_cli as cli

yaml = pytest.importorskip("yaml")

DEPLOY = pathlib.Path(__file__).resolve().parents[2] / "deploy"


def _toml(text):
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    return tomllib.loads(text)


@pytest.fixture(scope="module")
def manifest():
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "replay-shards.yaml").read_text()))
    return {d["kind"]: d for d in docs}


def test_the_config_map_holds_a_valid_server_config(manifest):
    config = _toml(manifest["ConfigMap"]["data"]["server.toml"])
    tables = cli.tables_from_config(config)
    assert [t.name for t in tables] == ["replay"]


def test_the_statefulset_runs_ostinato_server_with_valid_flags(manifest):
    sts, svc, cm = manifest["StatefulSet"], manifest["Service"], manifest["ConfigMap"]
    assert svc["spec"]["clusterIP"] == "None"  # headless: a DNS name per pod
    assert sts["spec"]["serviceName"] == svc["metadata"]["name"]
    assert svc["spec"]["selector"] == sts["spec"]["template"]["metadata"]["labels"]
    pod = sts["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = cli.build_parser().parse_args(container["args"])
    assert args.host == "0.0.0.0" and args.checkpoint_on_exit
    assert container["ports"][0]["containerPort"] == args.port == svc["spec"]["ports"][0]["port"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert args.config == f"{mounts['config']}/server.toml"
    assert "server.toml" in cm["data"]
    assert pod["volumes"][0]["configMap"]["name"] == cm["metadata"]["name"]
    assert args.checkpoint_dir.startswith(mounts["data"] + "/")
    assert [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]] == ["data"]
    assert [e["name"] for e in container["env"]] == ["OSTINATO_TOKEN"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    annotations = sts["spec"]["template"]["metadata"]["annotations"]
    assert ports["metrics"] == args.metrics_port == int(annotations["prometheus.io/port"])


def test_the_dockerfile_runs_ostinato_server_with_valid_flags():
    text = (DEPLOY / "Dockerfile").read_text()
    entry = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", text, re.M).group(1))
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", text, re.M).group(1))
    assert entry == ["ostinato-server"]
    pyproject = (DEPLOY.parent / "pyproject.toml").read_text()
    assert 'ostinato-server = "ostinato.server_cli:main"' in pyproject
    args = cli.build_parser().parse_args(cmd)
    assert args.host == "0.0.0.0" and args.checkpoint_dir.startswith("/data/")
    assert re.search(rf"^EXPOSE {args.port} {args.metrics_port}$", text, re.M)
    assert '".[yaml,metrics]"' in text  # --metrics-port needs the extra
