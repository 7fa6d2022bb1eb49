"""The wire protocol between the isoagent parent and its child processes.

Imports nothing but msgspec and the standard library.
"""

from protocol.frames import (
    PROTOCOL_VERSION,
    AgentSpec,
    Block,
    Cancel,
    ChildFrame,
    Hello,
    Limits,
    Message,
    ModelCall,
    ModelError,
    ModelReply,
    ParentFrame,
    Progress,
    Result,
    Status,
    Task,
    TextBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    Usage,
)
from protocol.framing import FrameError, FrameReader, FrameWriter, decode_frame, encode_frame

__all__ = [
    "PROTOCOL_VERSION",
    "AgentSpec",
    "Block",
    "Cancel",
    "ChildFrame",
    "FrameError",
    "FrameReader",
    "FrameWriter",
    "Hello",
    "Limits",
    "Message",
    "ModelCall",
    "ModelError",
    "ModelReply",
    "ParentFrame",
    "Progress",
    "Result",
    "Status",
    "Task",
    "TextBlock",
    "ToolResultBlock",
    "ToolSpec",
    "ToolUseBlock",
    "Usage",
    "decode_frame",
    "encode_frame",
]
