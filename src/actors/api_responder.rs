//! ApiResponder actor: answers the query and cancel API (docs/CONTRACT.md §6) — `get`, `list`,
//! `cancel`, `stats` on `timer.api.<verb>.<tenantId>`.
//!
//! Every request is scoped by the tenant in its subject: reads go through Persistence with that
//! tenant, so another tenant's timer is simply not found. A `cancel` is ordered with every other
//! command: it is published as a `CancelTimer` to the command stream, applied with the sequence
//! the PubAck gave it, and answered only once committed (the CommandHandler meets the same
//! command later and changes nothing). A bad request is answered 400 with a reason.
//!
//! Requests are handled in tasks of their own, at most `[api] max_in_flight_per_tenant` of one
//! tenant at once while the tenant's others wait their turn (`admission`), so a slow one holds
//! up no other and one tenant's flood waits behind itself; reads also take turns by tenant on
//! Persistence's reader connections. A request's failure or panic reaches only its caller, who is answered 500
//! either way. When the service cannot receive any more (the connection closed), the actor
//! fails and is restarted.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio_util::task::AbortOnDropHandle;

use super::registry::Registry;
use super::supervisor::NamedActor;
use crate::backoff::Retries;
use crate::domain::Subjects;
use crate::ports::{ApiRequest, ApiServer, Clock, CommandPublisher};

mod admission;
mod handler;
mod ordered;
mod serving;

use handler::Handler;
use serving::{Intake, serve};

/// Requests waiting or handled, all tenants together; past this, receiving waits.
pub const MAX_QUEUED: usize = 4_096;

#[derive(Default)]
pub struct ApiResponder;

impl NamedActor for ApiResponder {
    const NAME: &'static str = "api_responder";
}

#[derive(Clone)]
pub struct ApiResponderArgs {
    pub registry: Registry,
    pub server: Arc<dyn ApiServer>,
    pub publisher: Arc<dyn CommandPublisher>,
    pub clock: Arc<dyn Clock>,
    pub subjects: Subjects,
    /// Most requests of one tenant handled at once.
    pub max_in_flight_per_tenant: usize,
}

pub struct ApiResponderState {
    args: ApiResponderArgs,
    /// What every request goes through, the NATS service's and the process's own alike.
    intake: Intake,
    /// The task receiving requests; aborted (stopping the service) when the actor ends.
    serving: Option<AbortOnDropHandle<()>>,
    failed_starts: Retries,
}

pub enum ApiResponderMsg {
    /// Start the service (again, after a failed attempt).
    Start,
    /// The service can no longer receive requests.
    Ended,
    /// A request from within the process (the console), answered like one from the broker,
    /// in its tenant's turns; it is answered even while the broker's service cannot start.
    Local(ApiRequest),
}

impl Actor for ApiResponder {
    type Msg = ApiResponderMsg;
    type State = ApiResponderState;
    type Arguments = ApiResponderArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: ApiResponderArgs,
    ) -> Result<ApiResponderState, ActorProcessingErr> {
        let intake = Intake::new(Handler::new(&args), args.max_in_flight_per_tenant.max(1));
        Ok(ApiResponderState {
            args,
            intake,
            serving: None,
            failed_starts: Retries::default(),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _state: &mut ApiResponderState,
    ) -> Result<(), ActorProcessingErr> {
        myself.cast(ApiResponderMsg::Start)?;
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut ApiResponderState,
    ) -> Result<(), ActorProcessingErr> {
        state.serving.take();
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: ApiResponderMsg,
        state: &mut ApiResponderState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ApiResponderMsg::Start => match state.args.server.start().await {
                Ok(requests) => {
                    tracing::info!(
                        actor = ApiResponder::NAME,
                        prefix = state.args.subjects.api_prefix(),
                        "answering the query and cancel API"
                    );
                    state.failed_starts.succeeded();
                    let task = tokio::spawn(serve(requests, state.intake.clone(), myself.clone()));
                    state.serving = Some(AbortOnDropHandle::new(task));
                }
                Err(e) => {
                    let delay = state.failed_starts.failed();
                    tracing::warn!(actor = ApiResponder::NAME, error = %e,
                        retry_in_ms = delay.as_millis() as u64, "cannot start the API");
                    myself.send_after(delay, || ApiResponderMsg::Start);
                }
            },
            ApiResponderMsg::Ended => {
                return Err("the API service stopped receiving requests".into());
            }
            ApiResponderMsg::Local(request) => {
                let intake = state.intake.clone();
                tokio::spawn(async move { intake.take(request).await });
            }
        }
        Ok(())
    }
}

impl Registry {
    /// Hands a request from within the process to the ApiResponder; false when it is not
    /// running (restarting).
    pub fn api_request(&self, request: ApiRequest) -> bool {
        self.get::<ApiResponderMsg>(ApiResponder::NAME)
            .is_some_and(|api| api.cast(ApiResponderMsg::Local(request)).is_ok())
    }
}
