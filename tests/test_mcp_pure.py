"""The MCP client's pure parts: tool names, schemas made fit for strict servers, the mode the
schemas' cost chooses, finding tools by words, and the config's one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ouroboros.context.mask import placeholder
from ouroboros.ground.config_file import load_settings
from ouroboros.ground.errors import ConfigError
from ouroboros.ground.messages import ToolMessage
from ouroboros.mcp.catalogue import McpTool, find_answer, found, mode_for
from ouroboros.mcp.names import MAX_NAME, tool_names
from ouroboros.mcp.schemas import fitted, normalised
from ouroboros.model.scripted import Reply, ScriptedServer, tool
from tests.conftest import Project


def test_names_are_prefixed_sanitised_and_capped() -> None:
    long = "t" * 80
    names = tool_names([("time", "get_current_time"), ("my.server", "do it!"), ("s", long)])
    assert names[0] == "mcp__time__get_current_time"
    assert names[1] == "mcp__my_server__do_it_"
    assert len(names[2]) == MAX_NAME
    assert names[2].startswith("mcp__s__ttt")


def test_names_that_collide_get_a_hash_and_never_a_built_ins() -> None:
    names = tool_names([("a", "x.y"), ("a", "x_y"), ("a", "x y")], taken=["mcp__a__x_y"])
    assert len(set(names)) == 3
    assert "mcp__a__x_y" not in names
    assert all(len(n) <= MAX_NAME and n.startswith("mcp__a__x_y_") for n in names)
    assert tool_names([("a", "x.y")], taken=["mcp__a__x_y"]) == names[:1]  # the same each run


def test_schemas_keep_only_what_strict_servers_take() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "url": {"type": "string", "format": "uri", "default": "x", "title": "URL"},
            "when": {"type": ["string", "null"], "examples": ["today"]},
            "mode": {"const": "fast"},
            "pick": {"oneOf": [{"type": "integer"}, {"type": "string"}]},
            "maybe": {"anyOf": [{"type": "number"}, {"type": "null"}]},
        },
        "required": ["url", "gone"],
    }
    assert normalised(schema) == {
        "type": "object",
        "properties": {
            "url": {"type": "string"},
            "when": {"type": "string"},
            "mode": {"enum": ["fast"]},
            "pick": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            "maybe": {"type": "number"},
        },
        "required": ["url"],
    }


def test_refs_are_inlined_and_recursive_ones_cut() -> None:
    schema = {
        "type": "object",
        "$defs": {
            "Point": {"type": "object", "properties": {"x": {"type": "number"}}},
            "Node": {
                "type": "object",
                "properties": {"child": {"$ref": "#/$defs/Node"}},
            },
        },
        "properties": {
            "at": {"$ref": "#/$defs/Point", "description": "where"},
            "tree": {"$ref": "#/$defs/Node"},
            "elsewhere": {"$ref": "https://example.com/schema.json"},
        },
    }
    assert normalised(schema)["properties"] == {
        "at": {"type": "object", "properties": {"x": {"type": "number"}}, "description": "where"},
        "tree": {"type": "object", "properties": {"child": {"type": "object"}}},
        "elsewhere": {"type": "object"},
    }


@pytest.mark.parametrize(
    "schema", [None, [], "object", {"type": "string"}, {"properties": "x"}, {"type": ["null"]}]
)
def test_any_schema_a_server_sends_becomes_an_object(schema: object) -> None:
    assert normalised(schema) == {"type": "object", "properties": {}}


def test_deep_nesting_is_cut() -> None:
    schema: dict[str, object] = {"type": "string"}
    for _ in range(50):
        schema = {"type": "object", "properties": {"a": schema}}
    depth, node = 0, normalised(schema)
    while "properties" in node:
        node, depth = node["properties"]["a"], depth + 1
    assert depth < 12


def test_patterns_and_huge_bounds_are_left_to_the_server() -> None:
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "string", "pattern": "[a-z]+", "maxLength": 32},
            "text": {"type": "string", "minLength": 1, "maxLength": 100_000},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 5000},
        },
    }
    assert normalised(schema)["properties"] == {
        "id": {"type": "string", "maxLength": 32},
        "text": {"type": "string", "minLength": 1},
        "tags": {"type": "array", "items": {"type": "string"}},
    }


def test_a_small_schema_of_shared_refs_is_cut_to_a_bare_object() -> None:
    # 2 KB that inline to ~70M tokens: each level's $ref used seven times by the next.
    definitions: dict[str, object] = {
        f"d{i}": {
            "type": "object",
            "properties": {f"p{j}": {"$ref": f"#/$defs/d{i + 1}"} for j in range(7)},
        }
        for i in range(9)
    }
    definitions["d9"] = {"type": "string"}
    schema = {
        "type": "object",
        "description": "shared",
        "properties": {"x": {"$ref": "#/$defs/d0"}},
        "$defs": definitions,
    }
    cut = fitted(schema)
    assert cut.cut
    assert cut.schema == {"type": "object", "properties": {}, "description": "shared"}
    assert not fitted({**schema, "properties": {"x": {"$ref": "#/$defs/d7"}}}).cut


def test_all_of_and_nullable_refs_keep_the_referenced_object() -> None:
    base = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
    schema = {
        "type": "object",
        "$defs": {"Base": base},
        "properties": {
            "item": {"allOf": [{"$ref": "#/$defs/Base"}], "description": "the item"},
            "maybe": {"anyOf": [{"$ref": "#/$defs/Base"}, {"type": "null"}]},
        },
    }
    assert normalised(schema)["properties"] == {
        "item": {**base, "description": "the item"},
        "maybe": base,
    }


def test_the_mode_follows_the_share() -> None:
    assert mode_for(100, 1000, 0.15) == "direct"
    assert mode_for(150, 1000, 0.15) == "direct"
    assert mode_for(151, 1000, 0.15) == "search"


def _tool(server: str, name: str, description: str, *params: str) -> McpTool:
    properties = {p: {"type": "string"} for p in params}
    return McpTool(
        f"mcp__{server}__{name}",
        server,
        name,
        description,
        {"type": "object", "properties": properties},
    )


TOOLS = [
    _tool("time", "get_current_time", "Get the current time in a timezone", "timezone"),
    _tool("time", "convert_time", "Convert a time between timezones", "source_timezone", "time"),
    _tool("git", "git_log", "Show the commit logs", "repo_path", "max_count"),
    _tool("git", "git_diff", "Show changes between commits", "repo_path", "target"),
]


def test_finding_ranks_names_over_descriptions() -> None:
    assert [t.tool for t in found(TOOLS, "current time", 2)] == ["get_current_time", "convert_time"]
    assert [t.tool for t in found(TOOLS, "commit log", 1)] == ["git_log"]
    assert found(TOOLS, "weather forecast", 5) == []


def test_the_answer_is_compact_schemas_or_the_names() -> None:
    answer = find_answer(TOOLS, "diff", 3)
    assert answer.splitlines()[1].startswith('{"name":"mcp__git__git_diff"')
    assert "mcp_call" in answer.splitlines()[0]
    missing = find_answer(TOOLS, "weather", 3)
    assert missing.startswith(
        "no tool matches 'weather'; the tools are: mcp__time__get_current_time"
    )


@pytest.mark.parametrize(
    ("servers", "said"),
    [
        ("[mcp.servers.x]\n", "mcp.servers.x: give either command"),
        ('[mcp.servers.x]\ncommand = "a"\nurl = "http://h"\n', "mcp.servers.x: give either"),
        ('[mcp.servers.x]\nurl = "http://h"\ncwd = "w"\n', "are for stdio servers only"),
        ('[mcp.servers.x]\nurl = "ftp://h"\n', "url must start with http://"),
        ('[mcp.servers."a b"]\ncommand = "a"\n', "mcp.servers.a b: a server's name holds"),
        ('[mcp.servers.x]\ncommand = "a"\ntimeout = 3\n', "mcp.servers.x.timeout: unknown key"),
        ('[mcp.servers.x]\ncommand = "a"\ncall_timeout_s = 0\n', "call_timeout_s"),
        ("[mcp]\nschema_share = 2\n", "mcp.schema_share"),
    ],
)
def test_a_bad_server_config_is_one_line_saying_what_to_fix(
    tmp_path: Path, servers: str, said: str
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(servers)
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert said in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("name", "arguments", "said"),
    [
        ("mcp__time__now", {"timezone": "UTC"}, "[mcp__time__now result masked: 2 lines, 17 bytes"),
        ("mcp_call", {"name": "mcp__git__log"}, "[mcp_call result masked: mcp__git__log, 2 lines"),
        ("mcp_find_tools", {"query": "git log"}, "[mcp_find_tools result masked: git log,"),
    ],
)
def test_a_masked_result_names_the_server_and_tool(
    name: str, arguments: dict[str, object], said: str
) -> None:
    message = ToolMessage(
        tool_call_id="c1", name=name, content="line one\nline two", arguments=json.dumps(arguments)
    )
    assert placeholder(message).startswith(said)


BLOCKED_SDK_RUN = """
import sys
sys.modules["mcp"] = sys.modules["mcp_types"] = None  # any import of the SDK fails
from ouroboros.cli import main
raise SystemExit(main(["run", "--max-turns", "2"]))
"""


@pytest.mark.slow
def test_the_harness_needs_no_sdk_without_servers(project: Project) -> None:
    script = [Reply(tool_calls=[tool("shell_exec", command="echo ran")]), Reply(text="done")]
    with ScriptedServer(script) as server:
        project.configure(server.url)
        done = subprocess.run(
            [sys.executable, "-c", BLOCKED_SDK_RUN],
            cwd=project.root,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    assert [e["reason"] for e in project.events("run_end")] == ["max_total_turns"]
    assert not project.events("mcp_offered")


def test_a_result_is_text_whatever_its_blocks() -> None:
    types = pytest.importorskip("mcp_types", reason="the [mcp] extra")
    from ouroboros.mcp.content import result_text

    result = types.CallToolResult(
        content=[
            types.TextContent(text="first"),
            types.ImageContent(data="aGVsbG8=", mime_type="image/png"),
            types.EmbeddedResource(
                resource=types.TextResourceContents(uri="file:///a.txt", text="inside")
            ),
            types.ResourceLink(uri="file:///b.bin", name="b"),
        ]
    )
    assert result_text(result) == (
        "first\n[image image/png, 6 bytes, not shown]\n[resource file:///a.txt]\ninside\n"
        "[resource link file:///b.bin b]"
    )
    structured = types.CallToolResult(content=[], structured_content={"n": 1})
    assert result_text(structured) == '{"n": 1}'
    assert result_text(types.CallToolResult(content=[])) == "(no output)"


def test_the_docs_example_is_a_valid_config(tmp_path: Path) -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "mcp.md").read_text()
    example = page.split("# MCP servers")[1].split("```toml\n")[1].split("```")[0]
    config = tmp_path / "config.toml"
    config.write_text(example)
    servers = load_settings(config).mcp.servers
    assert list(servers) == ["time", "git", "notes"]
    assert servers["git"].network is False
    assert servers["notes"].url == "http://127.0.0.1:8000/mcp"
