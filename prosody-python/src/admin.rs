//! Topic administration, seen from Python.

use prosody::{AdminClient, TopicOptions};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use std::sync::Arc;
use std::time::Duration;

/// An admin client of a Kafka cluster.
#[pyclass(module = "prosody._prosody", frozen)]
pub(crate) struct NativeAdmin(Arc<AdminClient>);

fn admin(error: prosody::AdminError) -> PyErr {
    match error {
        prosody::AdminError::MissingServers | prosody::AdminError::Environment { .. } => {
            PyValueError::new_err(error.to_string())
        }
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

#[pymethods]
impl NativeAdmin {
    #[new]
    #[pyo3(signature = (bootstrap_servers))]
    fn new(bootstrap_servers: Option<Vec<String>>) -> PyResult<Self> {
        let _guard = crate::engine()?.enter();
        AdminClient::new(bootstrap_servers)
            .map(|a| Self(Arc::new(a)))
            .map_err(admin)
    }

    #[pyo3(signature = (name, partition_count, replication_factor, cleanup_policy, retention))]
    fn create_topic<'py>(
        &self,
        py: Python<'py>,
        name: String,
        partition_count: Option<i32>,
        replication_factor: Option<i32>,
        cleanup_policy: Option<String>,
        retention: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let retention = retention
            .map(|s| {
                Duration::try_from_secs_f64(s).map_err(|_| {
                    PyValueError::new_err(format!(
                        "retention {s} is not a non-negative number of seconds"
                    ))
                })
            })
            .transpose()?;
        let options = TopicOptions {
            partitions: partition_count,
            replication_factor,
            cleanup_policy,
            retention,
        };
        let admin = Arc::clone(&self.0);
        crate::awaitable::awaitable(py, async move {
            admin
                .create_topic(&name, &options)
                .await
                .map_err(self::admin)
        })
    }

    fn delete_topic<'py>(&self, py: Python<'py>, name: String) -> PyResult<Bound<'py, PyAny>> {
        let admin = Arc::clone(&self.0);
        crate::awaitable::awaitable(py, async move {
            admin.delete_topic(&name).await.map_err(self::admin)
        })
    }
}
