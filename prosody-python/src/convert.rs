//! JSON values to Python objects and back.

use prosody::{Message, Timestamp};
use prosody_bind::Item;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

/// A JSON value as the Python object `json.loads` would make.
pub(crate) fn to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(flag) => PyBool::new(py, *flag).to_owned().into_any(),
        Value::Number(number) => {
            if let Some(int) = number.as_i64() {
                int.into_pyobject(py)?.into_any()
            } else if let Some(int) = number.as_u64() {
                int.into_pyobject(py)?.into_any()
            } else {
                number
                    .as_f64()
                    .unwrap_or(f64::NAN)
                    .into_pyobject(py)?
                    .into_any()
            }
        }
        Value::String(text) => PyString::new(py, text).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(fields) => {
            let dict = PyDict::new(py);
            for (key, item) in fields {
                dict.set_item(key, to_py(py, item)?)?;
            }
            dict.into_any()
        }
    })
}

/// A Python object as JSON: `None`, booleans, numbers, strings, lists,
/// tuples and dicts with string keys; anything else is a `TypeError`
/// naming its type.
pub(crate) fn to_json(object: &Bound<'_, PyAny>) -> PyResult<Value> {
    if object.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(flag) = object.cast::<PyBool>() {
        return Ok(Value::Bool(flag.is_true()));
    }
    if object.is_instance_of::<PyInt>() {
        if let Ok(int) = object.extract::<i64>() {
            return Ok(Value::from(int));
        }
        if let Ok(int) = object.extract::<u64>() {
            return Ok(Value::from(int));
        }
        return Err(PyTypeError::new_err(
            "an integer beyond 64 bits has no JSON representation here",
        ));
    }
    if let Ok(float) = object.cast::<PyFloat>() {
        let value = float.value();
        return Number::from_f64(value)
            .map(Value::Number)
            .ok_or_else(|| PyTypeError::new_err(format!("{value} has no JSON representation")));
    }
    if let Ok(text) = object.cast::<PyString>() {
        return Ok(Value::String(text.to_str()?.to_owned()));
    }
    if let Ok(list) = object.cast::<PyList>() {
        return list
            .iter()
            .map(|item| to_json(&item))
            .collect::<PyResult<_>>()
            .map(Value::Array);
    }
    if let Ok(tuple) = object.cast::<PyTuple>() {
        return tuple
            .iter()
            .map(|item| to_json(&item))
            .collect::<PyResult<_>>()
            .map(Value::Array);
    }
    if let Ok(dict) = object.cast::<PyDict>() {
        let mut fields = Map::new();
        for (key, item) in dict.iter() {
            let Ok(key) = key.cast::<PyString>() else {
                return Err(PyTypeError::new_err(format!(
                    "a JSON object's keys are strings, not {}",
                    key.get_type().name()?
                )));
            };
            fields.insert(key.to_str()?.to_owned(), to_json(&item)?);
        }
        return Ok(Value::Object(fields));
    }
    Err(PyTypeError::new_err(format!(
        "an object of type {} has no JSON representation",
        object.get_type().name()?
    )))
}

/// The arguments of an operation: messages by their native handle, the
/// rest as JSON.
pub(crate) fn items(args: &Bound<'_, PyTuple>) -> PyResult<Vec<Item>> {
    args.iter()
        .map(|arg| match arg.cast::<NativeMessage>() {
            Ok(message) => Ok(Item::Message(Box::new(message.get().0.clone()))),
            Err(_) => to_json(&arg).map(Item::Json),
        })
        .collect()
}

/// An item as Python sees it: JSON as Python values, a message as the
/// fields of a `Message` with its native handle.
pub(crate) fn item(py: Python<'_>, item: Item) -> PyResult<Bound<'_, PyAny>> {
    match item {
        Item::Json(value) => to_py(py, &value),
        Item::Message(message) => {
            let fields = PyDict::new(py);
            fields.set_item("topic", message.topic.to_string())?;
            fields.set_item("partition", message.partition)?;
            fields.set_item("offset", message.offset)?;
            fields.set_item("timestamp", seconds(message.timestamp))?;
            fields.set_item("key", message.key.to_string())?;
            fields.set_item("payload", to_py(py, &message.payload)?)?;
            fields.set_item("native", NativeMessage(*message))?;
            Ok(fields.into_any())
        }
    }
}

/// A message a handler received, kept for the message collections.
#[pyclass(module = "prosody._prosody", frozen)]
pub(crate) struct NativeMessage(pub(crate) Message<Value>);

/// A timestamp as seconds since the epoch (exact: milliseconds since 1970
/// fit a double).
pub(crate) fn seconds(time: Timestamp) -> f64 {
    #[allow(
        clippy::cast_precision_loss,
        reason = "milliseconds since 1970 fit a double exactly"
    )]
    let seconds = time.as_millis() as f64 / 1000.0;
    seconds
}

/// Seconds since the epoch as a timestamp (timers keep whole seconds).
pub(crate) fn timestamp(at: f64) -> PyResult<Timestamp> {
    if !at.is_finite() {
        return Err(PyValueError::new_err(format!("{at} is not a time")));
    }
    #[allow(
        clippy::cast_possible_truncation,
        reason = "checked finite; the store keeps seconds"
    )]
    let millis = (at * 1000.0).round() as i64;
    Ok(Timestamp::from_millis(millis))
}
