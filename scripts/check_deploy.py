#!/usr/bin/env python3
"""The checks of deploy/ that need more than a validator (scripts/check-deploy.sh runs them).

  compose RESOLVED.json        the compose file as `docker compose config --format json` resolved
                               it: the parts refer to each other as they must
  kubernetes DIR               the manifests refer to each other as they must
  run ROOT IMAGE.json ...      the daemon of an image's filesystem, run as the image's user in a
                               chroot against a real NATS and database, answers /readyz with 200

Each check prints what it found and exits non-zero naming the first thing wrong.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import yaml

# The variables the kubelet writes for the Service of deploy/kubernetes/service.yaml (named
# `timer`, port 9464 named `http`), with a made-up cluster IP.
SERVICE_LINKS = {
    "TIMER_SERVICE_HOST": "10.96.0.10",
    "TIMER_SERVICE_PORT": "9464",
    "TIMER_SERVICE_PORT_HTTP": "9464",
    "TIMER_PORT": "tcp://10.96.0.10:9464",
    "TIMER_PORT_9464_TCP": "tcp://10.96.0.10:9464",
    "TIMER_PORT_9464_TCP_PROTO": "tcp",
    "TIMER_PORT_9464_TCP_PORT": "9464",
    "TIMER_PORT_9464_TCP_ADDR": "10.96.0.10",
}
DAEMONS = ["timer-1", "timer-2", "timer-3"]


def fail(message):
    print(f"FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def expect(condition, message):
    if not condition:
        fail(message)


def check_compose(resolved_path, repo):
    project = json.load(open(resolved_path))
    services = project["services"]
    for name in ["nats", "postgres", *DAEMONS, "prometheus", "grafana"]:
        expect(name in services, f"compose: no service {name}")

    nats = services["nats"]
    expect("--jetstream" in nats.get("command", []), "compose: nats runs without --jetstream")
    # Its pings short (docs/deployment.md, "The broker's pings"): the file it is given sets them.
    conf = open(os.path.join(repo, "deploy", "nats-server.conf")).read()
    expect("--config" in nats.get("command", []) and 'ping_interval: "5s"' in conf,
           "compose: nats runs without deploy/nats-server.conf's short pings")
    expect(nats.get("healthcheck", {}).get("test"), "compose: nats has no health check")
    expect(services["postgres"].get("healthcheck", {}).get("test"), "compose: postgres has no health check")

    names = set()
    for name in DAEMONS:
        daemon = services[name]
        env = daemon.get("environment", {})
        names.add(env.get("TIMER_NAME"))
        expect(env.get("TIMER_BROKER_URL", "").startswith("nats://nats:"), f"compose: {name} not on the nats service")
        expect("@postgres:" in env.get("TIMER_DATABASE_URL", ""), f"compose: {name} not on the postgres service")
        for dependency in ["nats", "postgres"]:
            condition = daemon.get("depends_on", {}).get(dependency, {}).get("condition")
            expect(condition == "service_healthy", f"compose: {name} does not wait for {dependency} to be healthy")
    expect(len(names) == len(DAEMONS) and None not in names, f"compose: daemon names not unique: {names}")
    builds = [name for name in DAEMONS if "build" in services[name]]
    expect(builds == ["timer-1"], f"compose: the image is built by {builds}, not by timer-1 alone")
    build = services["timer-1"]["build"]
    containerfile = os.path.join(build["context"], build["dockerfile"])
    expect(os.path.isfile(containerfile), f"compose: no {containerfile}")

    # Every file the compose file mounts exists.
    mounts = {}
    for name, service in services.items():
        for volume in service.get("volumes", []):
            if volume["type"] == "bind":
                expect(os.path.exists(volume["source"]), f"compose: {name} mounts missing {volume['source']}")
                mounts[(name, volume["target"])] = volume["source"]

    # Prometheus scrapes the three daemons on the port their image listens on.
    prometheus = yaml.safe_load(open(mounts[("prometheus", "/etc/prometheus/prometheus.yml")]))
    targets = sorted(t for job in prometheus["scrape_configs"] for c in job["static_configs"] for t in c["targets"])
    expect(targets == [f"{name}:9464" for name in DAEMONS], f"prometheus.yml scrapes {targets}")

    # Grafana: the data source is the prometheus service, the dashboard provider reads the
    # directory the dashboard is mounted in, and that file is ops/grafana-dashboard.json.
    provisioning = mounts[("grafana", "/etc/grafana/provisioning")]
    datasources = yaml.safe_load(open(os.path.join(provisioning, "datasources", "prometheus.yaml")))
    urls = [d["url"] for d in datasources["datasources"] if d["type"] == "prometheus"]
    expect(urls == ["http://prometheus:9090"], f"grafana data source urls {urls}")
    providers = yaml.safe_load(open(os.path.join(provisioning, "dashboards", "timer-service.yaml")))
    paths = [p["options"]["path"] for p in providers["providers"]]
    dashboards = [(target, source) for (service, target), source in mounts.items() if service == "grafana" and target.endswith(".json")]
    expect(len(dashboards) == 1, f"grafana mounts dashboards {dashboards}")
    target, source = dashboards[0]
    expect(os.path.dirname(target) in paths, f"grafana reads dashboards from {paths}, the dashboard is at {target}")
    expect(os.path.samefile(source, os.path.join(repo, "ops", "grafana-dashboard.json")), f"grafana's dashboard is {source}")
    json.load(open(source))
    print(f"compose: {len(services)} services; nats and postgres checked for health; "
          f"{len(DAEMONS)} daemons; prometheus scrapes {', '.join(targets)}; grafana provisioned")


def check_kubernetes(directory):
    kustomization = yaml.safe_load(open(os.path.join(directory, "kustomization.yaml")))
    resources = {}
    for file in kustomization["resources"]:
        for document in yaml.safe_load_all(open(os.path.join(directory, file))):
            resources[document["kind"]] = document
    listed = set(kustomization["resources"])
    present = {f for f in os.listdir(directory) if f.endswith(".yaml") and f != "kustomization.yaml"}
    expect(listed == present, f"kustomization.yaml lists {sorted(listed)}, the directory holds {sorted(present)}")
    for kind in ["ConfigMap", "Deployment", "Service", "PodDisruptionBudget"]:
        expect(kind in resources, f"kubernetes: no {kind}")

    deployment = resources["Deployment"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    def selects(selector):
        return all(labels.get(k) == v for k, v in selector.items())
    expect(selects(deployment["spec"]["selector"]["matchLabels"]), "the Deployment's selector misses its pods")
    expect(selects(resources["Service"]["spec"]["selector"]), "the Service's selector misses the pods")
    expect(selects(resources["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"]), "the PodDisruptionBudget's selector misses the pods")
    expect(resources["Service"]["metadata"]["name"] == "timer", "the Service is not named timer")

    pod = deployment["spec"]["template"]["spec"]
    expect(pod.get("enableServiceLinks") is False, "the pods get service links (enableServiceLinks is not false)")
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe, path in [("startupProbe", "/healthz"), ("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")]:
        get = container[probe]["httpGet"]
        expect(get["path"] == path and get["port"] in ports, f"{probe} is {get}")
    service_ports = resources["Service"]["spec"]["ports"]
    expect(all(p["targetPort"] in ports for p in service_ports), "the Service's target port is not the container's")
    config_map = resources["ConfigMap"]
    refs = [e["configMapRef"]["name"] for e in container.get("envFrom", [])]
    expect(refs == [config_map["metadata"]["name"]], f"the container reads config maps {refs}")
    listen = config_map["data"].get("TIMER_HTTP_LISTEN", "")
    expect(listen.endswith(f":{ports['http']}"), f"TIMER_HTTP_LISTEN {listen} is not the container's port")
    security = container["securityContext"]
    expect(security.get("readOnlyRootFilesystem") and security.get("allowPrivilegeEscalation") is False, "the container is not locked down")
    expect(pod["securityContext"].get("runAsNonRoot"), "the pod may run as root")
    print(f"kubernetes: {', '.join(sorted(resources))} refer to each other; service links off; "
          f"probes on port {ports['http']}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def readyz(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def run_image(root, image_json, env_overrides, expect_file, log_path, timeout):
    """Runs the image's entrypoint and command in `root` as the image's user, with the image's
    environment under `env_overrides`, until /readyz answers 200; then stops it with SIGTERM."""
    (image,) = json.load(open(image_json))
    config = image["Config"]
    user, _, group = config["User"].partition(":")
    uid, gid = int(user), int(group or user)
    expect(uid != 0, f"the image runs as root ({config['User']})")
    env = dict(e.split("=", 1) for e in config.get("Env", []))
    env.update(env_overrides)
    port = free_port()
    env["TIMER_HTTP_LISTEN"] = f"127.0.0.1:{port}"
    argv = config["Entrypoint"] + (config.get("Cmd") or [])
    workdir = config.get("WorkingDir") or "/"

    def enter():
        os.chroot(root)
        os.chdir(workdir)
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)

    log = open(log_path, "w")
    started = time.monotonic()
    process = subprocess.Popen(argv, env=env, preexec_fn=enter, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = started + timeout
        status = None
        while time.monotonic() < deadline and process.poll() is None:
            status = readyz(port)
            if status == 200:
                break
            time.sleep(0.1)
        expect(status == 200, f"/readyz answered {status} within {timeout} s (exit {process.poll()}); log {log_path}")
        ready = time.monotonic() - started
        ids = [line.split()[1:] for line in open(f"/proc/{process.pid}/status") if line.startswith(("Uid:", "Gid:"))]
        expect(ids == [[str(uid)] * 4, [str(gid)] * 4], f"the daemon runs with ids {ids}")
        if expect_file:
            path = os.path.join(root, expect_file.lstrip("/"))
            expect(os.path.exists(path), f"no {expect_file} in the image's filesystem")
            expect(os.stat(path).st_uid == uid, f"{expect_file} is not the image user's")
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=15)
        expect(code == 0, f"exit code {code} after SIGTERM; log {log_path}")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    lines = [json.loads(line) for line in open(log_path) if line.startswith("{")]
    expect(lines, f"no JSON log lines; log {log_path}")
    unknown = [l.get("variable") for l in lines if l.get("message", "").startswith("environment variable names no setting")]
    expect(not unknown, f"settings that are none: {unknown}")
    print(f"  {' '.join(argv)} as {uid}:{gid} in {workdir}: /readyz 200 after {ready:.1f} s, "
          f"stopped by SIGTERM with exit 0, no unknown setting among {len(env)} variables")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    compose = sub.add_parser("compose")
    compose.add_argument("resolved")
    compose.add_argument("--repo", default=".")
    kubernetes = sub.add_parser("kubernetes")
    kubernetes.add_argument("directory")
    run = sub.add_parser("run")
    run.add_argument("root")
    run.add_argument("image_json")
    run.add_argument("--env", action="append", default=[], help="NAME=VALUE over the image's")
    run.add_argument("--env-from-configmap", help="a ConfigMap manifest whose data is added")
    run.add_argument("--env-from-compose", nargs=2, metavar=("RESOLVED", "SERVICE"),
                     help="a compose service's environment, added")
    run.add_argument("--unset", action="append", default=[], help="a NAME left out")
    run.add_argument("--service-links", action="store_true", help="add the Service timer's links")
    run.add_argument("--expect-file", help="a file the daemon must create, owned by its user")
    run.add_argument("--log", required=True)
    run.add_argument("--timeout", type=float, default=30)
    args = parser.parse_args()

    if args.command == "compose":
        check_compose(args.resolved, args.repo)
    elif args.command == "kubernetes":
        check_kubernetes(args.directory)
    else:
        env = {}
        if args.env_from_configmap:
            env.update(yaml.safe_load(open(args.env_from_configmap))["data"])
        if args.env_from_compose:
            resolved, service = args.env_from_compose
            env.update(json.load(open(resolved))["services"][service].get("environment", {}))
        if args.service_links:
            env.update(SERVICE_LINKS)
        env.update(dict(e.split("=", 1) for e in args.env))
        for name in args.unset:
            env.pop(name, None)
        run_image(args.root, args.image_json, env, args.expect_file, args.log, args.timeout)


if __name__ == "__main__":
    main()
