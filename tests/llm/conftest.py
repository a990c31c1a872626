import pytest
from llm_helpers import SECRET


@pytest.fixture
def llm_env(monkeypatch):
    """Keys set (fake), base URLs cleared; the tests point the SDKs at local servers themselves."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-OPENAISECRET-0123456789")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("CUCO_OPENAI_COMPAT_KEY", raising=False)
    return monkeypatch
