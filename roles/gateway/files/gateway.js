// llmfleet.serving gateway: the key's name, routing by the JSON body's `model`, /v1/models (njs 0.7.9).
// The key is checked from the headers before anything else (gateway.conf answers 401 in the server's rewrite phase,
// through keyName below): js_content reads the whole body before route() runs, so route() and models() only ever
// see requests with a valid key. Their own check stays as a second guard.
import data from 'gateway_data.js';

var crypto = require('crypto');

function fail(r, status, message, type, code) {
    r.headersOut['Content-Type'] = 'application/json';
    r.return(status, JSON.stringify({error: {message: message, type: type, param: null, code: code}}));
}

// js_set: the name of the client's key, or '' (the key itself is never stored or logged); headers only, no body
function keyName(r) {
    var header = r.headersIn['Authorization'] || '';
    if (header.substring(0, 7) !== 'Bearer ') {
        return '';
    }
    var digest = crypto.createHash('sha256').update(header.substring(7).trim()).digest('hex');
    return Object.prototype.hasOwnProperty.call(data.keys, digest) ? data.keys[digest] : '';
}

function authorized(r) {
    if (r.variables.llmfleet_key_name) {
        return true;
    }
    fail(r, 401, 'Incorrect API key provided.', 'invalid_request_error', 'invalid_api_key');
    return false;
}

function route(r) {
    if (!authorized(r)) {
        return;
    }
    if (r.method !== 'POST') {
        fail(r, 405, 'Use POST for ' + r.uri + '.', 'invalid_request_error', 'method_not_allowed');
        return;
    }
    var body;
    try {
        body = JSON.parse(r.requestText);
    } catch (e) {
        fail(r, 400, 'We could not parse the JSON body of your request.', 'invalid_request_error', 'invalid_json');
        return;
    }
    var model = (body && typeof body.model === 'string') ? body.model : '';
    if (!model) {
        fail(r, 400, 'You must provide a model parameter.', 'invalid_request_error', 'missing_model');
        return;
    }
    if (!Object.prototype.hasOwnProperty.call(data.routes, model)) {
        fail(r, 404, 'The model `' + model + '` does not exist.', 'invalid_request_error', 'model_not_found');
        return;
    }
    r.variables.llmfleet_model = model;
    r.variables.llmfleet_upstream = data.routes[model];
    // the normalized path (one of the exact locations), not the client's spelling
    r.variables.llmfleet_path = r.uri;
    r.internalRedirect('@llmfleet_engine');
}

function models(r) {
    if (!authorized(r)) {
        return;
    }
    r.headersOut['Content-Type'] = 'application/json';
    r.return(200, data.models);
}

export default {keyName, route, models};
