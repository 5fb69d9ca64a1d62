//! A three-node nats-server cluster with JetStream on loopback: three processes, each with its
//! own client port, route port and storage, so a test can kill any one of them.

use std::time::Duration;

use super::{NatsServer, eventually, free_port};

pub struct NatsCluster {
    pub nodes: Vec<NatsServer>,
    /// `n1`, `n2`, `n3`: the server names JetStream reports leaders by.
    pub names: Vec<String>,
}

impl NatsCluster {
    pub async fn start() -> Self {
        let routes: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let route_urls = routes
            .iter()
            .map(|p| format!("\"nats-route://127.0.0.1:{p}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let names: Vec<String> = (1..=3).map(|i| format!("n{i}")).collect();
        let nodes = names
            .iter()
            .zip(&routes)
            .map(|(name, route)| {
                NatsServer::start_with_config(|port, store| {
                    format!(
                        r#"
server_name: {name}
listen: "127.0.0.1:{port}"
jetstream {{ store_dir: "{store}" }}
cluster {{
  name: timers
  listen: "127.0.0.1:{route}"
  routes: [{route_urls}]
}}
"#,
                        store = store.display()
                    )
                })
            })
            .collect();
        let cluster = Self { nodes, names };
        // JetStream answers once the nodes have elected a meta leader.
        let servers = timer_service::nats::server_addrs(&cluster.urls()).expect("URLs");
        let client = async_nats::connect(servers)
            .await
            .expect("connect to the cluster");
        let js = async_nats::jetstream::new(client);
        eventually(
            Duration::from_secs(30),
            "a JetStream meta leader",
            || async { js.query_account().await.ok().map(|_| ()) },
        )
        .await;
        cluster
    }

    /// Every node's URL, comma-separated, as a client lists them.
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(NatsServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The node named `name`.
    pub fn node(&mut self, name: &str) -> &mut NatsServer {
        let index = self
            .names
            .iter()
            .position(|n| n == name)
            .expect("a node of the cluster");
        &mut self.nodes[index]
    }
}
