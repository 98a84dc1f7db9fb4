//! The OTLP exporters' HTTP client: ureq, which loopbox already uses for
//! registries and the chat-completions runner, rather than a second HTTP
//! stack. The SDK calls it from its own export threads; a request is bounded
//! by the export timeout and an answer by 4 MiB (OTLP answers are small).

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use opentelemetry_http::{HttpClient, HttpError};

/// The largest answer read from a collector.
const MAX_ANSWER_BYTES: u64 = 4 << 20;

#[derive(Clone)]
pub(super) struct UreqClient {
    agent: ureq::Agent,
}

impl std::fmt::Debug for UreqClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UreqClient")
    }
}

impl UreqClient {
    pub(super) fn new(timeout: Duration) -> UreqClient {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            // A collector's 4xx/5xx is an answer the exporter reads, not a transport error.
            .http_status_as_error(false)
            // Nothing is sent anywhere the variables did not name.
            .max_redirects(0)
            .build()
            .into();
        UreqClient { agent }
    }
}

#[async_trait::async_trait]
impl HttpClient for UreqClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let request = Request::from_parts(parts, body.to_vec());
        let mut response = self.agent.run(request)?;
        let status = response.status();
        let answer = response
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_vec()?;
        let mut out = Response::builder().status(status);
        for (name, value) in response.headers() {
            out = out.header(name, value);
        }
        Ok(out.body(Bytes::from(answer))?)
    }
}
