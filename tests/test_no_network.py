"""The planner and the report's analytic sections need no network: run with sockets blocked."""

import json
import socket

import pytest


class NetworkUsed(AssertionError):
    pass


@pytest.fixture
def no_network(monkeypatch):
    """Every way of opening a connection or looking a name up raises (and is recorded)."""
    tried = []

    def refuse(what):
        def blocked(*args, **kwargs):
            tried.append((what, args[:2]))
            raise NetworkUsed(f"network used: {what}{args[:2]}")

        return blocked

    monkeypatch.setattr(socket, "socket", refuse("socket.socket"))
    monkeypatch.setattr(socket, "create_connection", refuse("socket.create_connection"))
    monkeypatch.setattr(socket, "getaddrinfo", refuse("socket.getaddrinfo"))
    monkeypatch.setattr(socket, "gethostbyname", refuse("socket.gethostbyname"))
    return tried


def test_plan_needs_no_network(cli, no_network):
    code, out, err = cli(
        "plan", "gpt3-175b", "--spec", "a100-80gb", "--gpus", "1024", "--global-batch", "1536",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["plans"]
    assert no_network == []


def test_report_amdahl_and_planner_need_no_network(cli, no_network, tmp_path):
    page = tmp_path / "r.html"
    code, out, err = cli("report", "--quick", "--only", "amdahl,planner", "-o", page, "--json")
    assert code == 0, err
    record = json.loads(out)
    assert [s["status"] for s in record["sections"]] == ["ok", "ok"], record["sections"]
    assert no_network == []
    html = page.read_text()
    # self-contained: nothing on the page is fetched from elsewhere
    for ref in ('src="http', "src='http", 'href="http', "@import", "url(http"):
        assert ref not in html
