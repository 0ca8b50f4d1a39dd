"""A tool call's result as text for the model: text blocks as they are, anything else (images,
audio, resources) named with its type and size, the structured content where there is no text.
Pure (the SDK's types only)."""

from __future__ import annotations

import json

import mcp_types as types


def result_text(result: types.CallToolResult) -> str:
    parts = [_block(block) for block in result.content]
    if not any(parts) and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, ensure_ascii=False)]
    return "\n".join(p for p in parts if p) or "(no output)"


def _block(block: object) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        kind = "image" if isinstance(block, types.ImageContent) else "audio"
        return f"[{kind} {block.mime_type}, {len(block.data) * 3 // 4:,} bytes, not shown]"
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return f"[resource {resource.uri}]\n{resource.text}"
        return f"[resource {resource.uri}, {resource.mime_type or 'binary'}, not shown]"
    if isinstance(block, types.ResourceLink):
        return f"[resource link {block.uri} {block.name}]"
    return f"[{type(block).__name__}, not shown]"
