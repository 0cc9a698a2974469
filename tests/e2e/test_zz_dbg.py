import openai
from test_server import *
def test_dbg(keyed_server):
    good = openai.OpenAI(base_url=f"{keyed_server}/v1", api_key="sekrit-123", max_retries=0, timeout=TIMEOUT)
    model = good.models.list().data[0].id
    try:
        good.chat.completions.create(model=model, messages=QUESTION, max_tokens=4, temperature=0)
    except Exception as e:
        r=e.response; print(r.status_code, repr(r.text), dict(r.headers), dict(r.request.headers), r.request.content, r.request.url)
        raise
