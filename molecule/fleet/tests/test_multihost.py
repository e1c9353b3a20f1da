"""Issue 38 on the fleet lab: one model over both engine hosts (`hosts: llm_serve`, the inventory group of the two), on
vLLM's own multi-node support with the CPU build - pipeline parallel over the two hosts, rank 0 on engine 1 serving the
API, rank 1 on engine 2 --headless - started, gated and stopped by the vllm role as one unit (its head's run, the other
rank through delegate_to), answered through the gateway with the official openai client. Then a roll (a flag of the
deployment changes: both ranks restart together, one health gate), a rank that cannot start (on engine 2: the
run fails naming that host, the group stays out of the rotation), the way back (the host fixed: the next serve.yml restarts
both and re-admits it; the run after changes nothing), and the group dropped from the inventory (both units gone, the gateway routes it no more).

Each rank's unit lets in only the group's members and loopback (systemd's IP filter): the other engine connects to
rank 0's --master-port, the gateway host and the Docker host get no answer.

The group runs beside the lab's other instances on the same two cores; it uses the lab's newer engine (0.32.0, in the
wheel folder), which tests/test_rolling.py rolls to later anyway."""

import json
import subprocess
import time

import yaml

from test_fleet import GATEWAY, HERE, LOAD_KEY, host, instances, run_playbook
from test_rolling import HOST_VARS, NEW, ENGINES, exec_start, started_at

GROUP = "tiny-g"
UNIT = f"llmfleet-vllm-{GROUP}-0"
ALL = ("plan.yml", "serve.yml", "gateway.yml")
DOWNTIME = ("-e", "vllm_allow_downtime=true")


def playbooks(*names, extra=()):
    """The playbooks one after the other in one run (plan.yml when the inventory changed, serve.yml, which starts, gates
    and stops the ranks, gateway.yml when the routes change): (result, stdout and stderr together)."""
    result = run_playbook(names[0], *[str(HERE.parents[2] / "playbooks" / name) for name in names[1:]], *extra)
    return result, result.stdout + result.stderr


def set_group(present, **overrides):
    """tiny-g on both engines (the same definition on each, as a group needs), with each host's private interface; or
    gone again."""
    for name in ENGINES:
        path = HOST_VARS / name
        data = yaml.safe_load(path.read_text())
        deps = [d for d in data["llmfleet_deployments"] if d["name"] != GROUP]
        if present:
            deps.append({"name": GROUP, "hosts": "llm_serve",
                         "model": {"id": "llmfleet/tiny-qwen3", "path": "/var/tmp/llmfleet-lab/models/tiny-qwen3"},
                         "workload": {"max_model_len": 512, "concurrency": 2, "thinking": False, "tools": False},
                         "engine": {"version": NEW}, "overrides": {"cpu_kvcache_space_gib": 1, **overrides}})
            data["llmfleet_private_interface"] = "eth0"
        data["llmfleet_deployments"] = deps
        path.write_text(yaml.safe_dump(data, sort_keys=False))


def answer():
    import openai  # noqa: PLC0415 (requirements.txt)
    client = openai.OpenAI(base_url=GATEWAY + "/v1", api_key=LOAD_KEY, timeout=120, max_retries=0)
    reply = client.chat.completions.create(model=GROUP, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8)
    return reply


def connects(name, address, port):
    """Does a TCP connection from this lab host (None: the Docker host, outside the lab's containers) to address:port
    open within 3 s? A port behind systemd's IP filter drops the packets of a host it does not allow: no answer."""
    probe = (f"import socket\ntry:\n socket.create_connection(({address!r}, {port}), timeout=3).close(); print('open')\n"
             f"except OSError as e:\n print('closed', e)")
    if name is None:
        said = subprocess.run(["python3", "-c", probe], capture_output=True, text=True, check=True).stdout
    else:
        said = host(name).check_output("python3 -c %s", probe)  # testinfra quotes the argument for the shell
    return said.strip()


def ranks():
    return {name: i for name, i in instances() if i["name"] == f"{GROUP}-0"}


def test_one_model_over_two_hosts_answers_rolls_fails_naming_a_missing_rank_and_leaves():
    set_group(True)
    try:
        t0 = time.monotonic()
        result, out = playbooks(*ALL)
        took = time.monotonic() - t0
        print(result.stdout[-3000:])
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
        planned = ranks()
        head, worker = planned["llmfleet-fleet-engine1"], planned["llmfleet-fleet-engine2"]
        assert head["group"]["rank"] == 0 and worker["group"]["rank"] == 1 and worker["headless"] and worker["port"] is None
        assert "runs as one engine over llmfleet-fleet-engine1, llmfleet-fleet-engine2" in out
        assert f"{GROUP}-0 (rank 1 of group llm_serve, started, gated and stopped by its head llmfleet-fleet-engine1)" in out
        rank0, rank1 = exec_start("llmfleet-fleet-engine1", f"{GROUP}-0"), exec_start("llmfleet-fleet-engine2", f"{GROUP}-0")
        assert "--node-rank 0" in rank0 and "--port" in rank0 and "--headless" not in rank0
        assert "--node-rank 1" in rank1 and "--headless" in rank1 and "--port" not in rank1 and "--master-addr 172.30.77.11" in rank1
        env1 = host("llmfleet-fleet-engine2").file(f"/etc/llmfleet/vllm/{GROUP}-0.env").content_string
        assert 'VLLM_HOST_IP="172.30.77.12"' in env1 and "VLLM_API_KEY" not in env1, "the headless rank holds no key"
        for name in ENGINES:
            assert host(name).service(UNIT).is_running, name
        reply = answer()
        print(f"\n[multihost] {GROUP} over two hosts (PP=2: rank 0 on engine 1, rank 1 --headless on engine 2) started in "
              f"{took:.0f} s (plan, serve and gateway); through the gateway with the openai client: "
              f"{reply.usage.completion_tokens} tokens {reply.choices[0].message.content!r}")
        assert reply.usage.completion_tokens >= 1 and reply.model == GROUP
        conf = host("llmfleet-fleet-gateway").file("/etc/nginx/llmfleet/gateway.conf").content_string
        upstream = conf[conf.index(f"upstream llmfleet_{GROUP.replace('-', '_')}"):]
        upstream = upstream[:upstream.index("}")]
        assert "172.30.77.11:" in upstream and "172.30.77.12:" not in upstream, upstream

        # the ranks' own ports (rank 0's store on --master-port, on every interface; Gloo and ZMQ ports) take packets from
        # the group's members and loopback only: systemd's IP filter on each rank's unit
        allow = "IPAddressAllow=127.0.0.0/8 ::1/128 172.30.77.11 172.30.77.12"
        for name in ENGINES:
            unit = host(name).file(f"/etc/systemd/system/{UNIT}.service").content_string.splitlines()
            assert "IPAddressDeny=any" in unit and allow in unit, (name, unit)
            counted = host(name).check_output(f"systemctl show -p IPIngressBytes --value {UNIT}")
            assert counted.isdigit() and int(counted) > 0, (name, counted, "systemd attached no IP filter")
        assert f"the IP filter of every running rank of {GROUP}-0 is in force" in out
        port = head["group"]["master_port"]
        seen = {who or "docker host": connects(who, "172.30.77.11", port)
                for who in ("llmfleet-fleet-engine2", "llmfleet-fleet-gateway", None)}
        print(f"[multihost] rank 0's --master-port 172.30.77.11:{port} from each host: {seen}")
        assert seen["llmfleet-fleet-engine2"] == "open", seen
        # dropped, not refused: no answer at all, as the filter drops the packets
        assert seen["llmfleet-fleet-gateway"] == "closed timed out" and seen["docker host"] == "closed timed out", seen

        # a roll: one flag of the deployment on both hosts; both ranks restart together, one gate, back in
        before = {name: started_at(name, f"{GROUP}-0") for name in ENGINES}
        set_group(True, max_num_seqs=3)
        t0 = time.monotonic()
        rolled, out = playbooks("plan.yml", "serve.yml", extra=DOWNTIME)
        took = time.monotonic() - t0
        print(rolled.stdout[-2500:])
        assert rolled.returncode == 0, rolled.stdout[-4000:] + rolled.stderr[-2000:]
        assert "every rank restarts together" in out and "llmfleet-fleet-engine2: its rank's files change" in out
        after = {name: started_at(name, f"{GROUP}-0") for name in ENGINES}
        assert all(after[n] != before[n] for n in ENGINES), "both ranks restarted"
        for name in ENGINES:
            assert "--max-num-seqs 3" in exec_start(name, f"{GROUP}-0"), name
        reply = answer()
        print(f"[multihost] roll (--max-num-seqs 3 on both ranks): {took:.0f} s; then {reply.usage.completion_tokens} tokens")

        # a rank that cannot start: the run fails naming its host; the head is left out of the rotation
        # (a drop-in the role does not own: every start of the rank fails before the engine runs, as on a broken host)
        worker_host = host("llmfleet-fleet-engine2")
        breaker = f"/etc/systemd/system/{UNIT}.service.d/lab-broken.conf"
        worker_host.run(f"mkdir -p {breaker.rsplit('/', 1)[0]} && printf '[Service]\\nExecStartPre=/bin/false\\n' > {breaker} "
                        f"&& systemctl daemon-reload && systemctl stop {UNIT}")
        try:
            failed, out = playbooks("serve.yml", extra=DOWNTIME)
            print(failed.stdout[-2000:] + failed.stderr[-2000:])
            assert failed.returncode != 0
            assert "llmfleet-fleet-engine2: not the running, enabled process that passed the last gate" in out
            assert f"rank not running or restarted by systemd: llmfleet-fleet-engine2 (its rank of {GROUP}-0" in out
            assert "come back as one group: it stays out of the gateway's rotation" in out
            assert " down;" in host("llmfleet-fleet-gateway").file("/etc/nginx/llmfleet/gateway.conf").content_string
        finally:
            # stopped first: systemd's own retries (Restart=on-failure) end, the rank stays down until the role starts it
            worker_host.run(f"systemctl stop {UNIT}; rm -rf {breaker.rsplit('/', 1)[0]} && systemctl daemon-reload")
        back, out = playbooks("serve.yml", extra=DOWNTIME)
        assert back.returncode == 0, back.stdout[-4000:] + back.stderr[-2000:]
        assert "every rank restarts together" in out
        reply = answer()
        # and the next run leaves the group alone: the same processes formed it, nothing to restart (no downtime allowed)
        steady = {name: started_at(name, f"{GROUP}-0") for name in ENGINES}
        again, out = playbooks("serve.yml")
        assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-2000:]
        assert "every rank restarts together" not in out
        assert {name: started_at(name, f"{GROUP}-0") for name in ENGINES} == steady, "a run with nothing to change restarted a rank"
        print(f"[multihost] rank 1 could not start: the run failed naming llmfleet-fleet-engine2; fixed, the next run restarted both "
              f"and re-admitted the head: {reply.usage.completion_tokens} tokens")
    finally:
        set_group(False)
        gone, _out = playbooks(*ALL)
        assert gone.returncode == 0, gone.stdout[-4000:] + gone.stderr[-2000:]
    for name in ENGINES:
        for leftover in (f"/etc/systemd/system/{UNIT}.service", f"/etc/systemd/system/{UNIT}.service.previous",
                         f"/etc/llmfleet/vllm/{GROUP}-0.env", f"/var/lib/llmfleet/vllm/{GROUP}-0.group.json"):
            assert not host(name).file(leftover).exists, (name, leftover)
    assert GROUP not in host("llmfleet-fleet-gateway").file("/etc/nginx/llmfleet/gateway.conf").content_string
    assert json.dumps(sorted(i["name"] for _h, i in instances())) == json.dumps(["tiny-a-0", "tiny-a-0", "tiny-b-0"])
