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
    // a stream's tokens are counted from its last event, which vLLM sends only when asked (stream_options.include_usage):
    // the gateway asks for it, and takes that event out again for a client that did not ask (usage below)
    var forward = r.requestText;
    if (r.variables.llmfleet_usage_accounting === '1' && body.stream === true && STREAM_USAGE_PATHS.indexOf(r.uri) >= 0) {
        var options = (body.stream_options && typeof body.stream_options === 'object') ? body.stream_options : {};
        if (options.include_usage !== true) {
            body.stream_options = Object.assign({}, options, {include_usage: true});
            forward = JSON.stringify(body);
            r.variables.llmfleet_usage_strip = '1';
        }
    }
    if (r.variables.llmfleet_usage_accounting === '1') {
        r.variables.llmfleet_body = forward;
    }
    r.variables.llmfleet_upstream = data.routes[model];
    // the normalized path (one of the exact locations), not the client's spelling
    r.variables.llmfleet_path = r.uri;
    r.internalRedirect('@llmfleet_engine');
}

// the paths whose streams carry a usage event when stream_options.include_usage is set (vLLM's chat and completions)
var STREAM_USAGE_PATHS = ['/v1/chat/completions', '/v1/completions'];
// how much of the text before each buffer is kept to find a usage object split across two buffers
var KEEP = 256;
// JSON as any serializer writes it (vLLM's is compact: "usage":{)
var USAGE = /"usage"\s*:\s*\{/;
var NO_CHOICES = /"choices"\s*:\s*\[\s*\]/;
// per request: njs runs each request in its own copy of this module, so this is the request's own
var before = '';

// js_body_filter of the engine's answer: every buffer passes on unchanged (as bytes: a UTF-8 character split across
// two buffers stays whole), except the stream's usage event when the gateway asked for it on the client's behalf.
// The last usage object seen goes into $llmfleet_prompt_tokens and $llmfleet_completion_tokens for the access log;
// they stay '' where the answer has none (an error, a pooling answer, a stream whose client did not get to its end).
function usage(r, data, flags) {
    var text = data.toString();
    var out = data;
    if (r.variables.llmfleet_usage_strip === '1' && USAGE.test(text)) {
        var events = text.split('\n\n');
        var kept = [];
        for (var i = 0; i < events.length; i++) {
            var e = events[i];
            // a whole event (the last piece has no blank line after it yet) with no choices and a usage: vLLM's last
            if (i < events.length - 1 && e.indexOf('data: {') === 0 && NO_CHOICES.test(e) && USAGE.test(e)) {
                continue;
            }
            kept.push(e);
        }
        if (kept.length !== events.length) {
            out = Buffer.from(kept.join('\n\n'));
        }
    }
    var seen = before + text;
    if (USAGE.test(seen)) {
        remember(r, seen);
    }
    before = seen.length > KEEP ? seen.substring(seen.length - KEEP) : seen;
    r.sendBuffer(out, flags);
}

// the last usage object of `text`, into the log's variables
function remember(r, text) {
    var at = -1;
    var found;
    var all = new RegExp(USAGE.source, 'g');
    while ((found = all.exec(text)) !== null) {
        at = found.index;
    }
    var part = text.substring(at);
    var prompt = /"prompt_tokens":\s*(\d+)/.exec(part);
    var completion = /"completion_tokens":\s*(\d+)/.exec(part);
    if (prompt) {
        r.variables.llmfleet_prompt_tokens = prompt[1];
    }
    if (completion) {
        r.variables.llmfleet_completion_tokens = completion[1];
    }
}

function models(r) {
    if (!authorized(r)) {
        return;
    }
    r.headersOut['Content-Type'] = 'application/json';
    r.return(200, data.models);
}

export default {keyName, route, models, usage};
