# The build stage compiles the hot path (setup.py, mypyc, which needs a C compiler); the
# image gets the wheel alone.
FROM python:3.11-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY gateway/ gateway/
RUN pip wheel --no-cache-dir --no-deps -w /wheels .

FROM python:3.11-slim

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/chat-gateway/bin:$PATH

# Its own venv, so that the image's PATH finds chat-gateway there and nothing else is installed
# into the system Python.
COPY --from=build /wheels /wheels
RUN python -m venv /opt/chat-gateway \
 && /opt/chat-gateway/bin/pip install --no-cache-dir /wheels/*.whl \
 && rm -rf /wheels

# The gateway reads /etc/chat-gateway/config.yaml. The image ships the demo config there, as the
# installed gateway writes it; mount your own over it,
# e.g. -v ./my-config.yaml:/etc/chat-gateway/config.yaml:ro
RUN mkdir -p /etc/chat-gateway \
 && chat-gateway demo --print-config > /etc/chat-gateway/config.yaml

RUN groupadd --system --gid 10001 gateway \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin gateway
# Numeric, so Kubernetes runAsNonRoot can verify it without resolving names.
USER 10001:10001
WORKDIR /

EXPOSE 8080

# slim has no curl; urlopen raises (exit 1) on connection errors and non-2xx answers.
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]

ENTRYPOINT ["chat-gateway"]
CMD ["serve", "--config", "/etc/chat-gateway/config.yaml", "--host", "0.0.0.0", "--port", "8080"]
