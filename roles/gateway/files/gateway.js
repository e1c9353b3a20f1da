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
    if (!Object.prototype.hasOwnProperty.call(data.keys, digest)) {
        return '';
    }
    // a rotated key's previous key: valid until the end of its overlap (gateway_api_keys[].previous_until), then refused
    if (Object.prototype.hasOwnProperty.call(data.until, digest) && Date.now() >= data.until[digest]) {
        return '';
    }
    return data.keys[digest];
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
    // a key limited to some models gets 403 for any other name, served or not: it learns nothing of the other models
    var allowed = Object.prototype.hasOwnProperty.call(data.allowed, r.variables.llmfleet_key_name)
        ? data.allowed[r.variables.llmfleet_key_name] : null;
    if (allowed && allowed.indexOf(model) < 0) {
        fail(r, 403, 'This API key may not use the model `' + model + '`.', 'invalid_request_error', 'model_not_allowed');
        return;
    }
    if (!Object.prototype.hasOwnProperty.call(data.routes, model)) {
        fail(r, 404, 'The model `' + model + '` does not exist.', 'invalid_request_error', 'model_not_found');
        return;
    }
    r.variables.llmfleet_model = model;
    r.variables.llmfleet_stream = body.stream === true ? '1' : '';
    if (r.variables.llmfleet_usage_accounting === '1') {
        r.variables.llmfleet_body = forwarded(r, body);
    }
    r.variables.llmfleet_upstream = data.routes[model];
    // routing session or prefix: a request that names its conversation goes to the model's hashing upstream
    if (Object.prototype.hasOwnProperty.call(data.affinity, model)) {
        var conversation = conversationKey(r, body, data.affinity[model].mode);
        if (conversation) {
            r.variables.llmfleet_affinity = conversation;
            r.variables.llmfleet_upstream = data.affinity[model].upstream;
        }
    }
    // the normalized path (one of the exact locations), not the client's spelling
    r.variables.llmfleet_path = r.uri;
    r.internalRedirect('@llmfleet_engine');
}

// How much of a prompt places a conversation (routing prefix): enough to tell conversations apart, bounded work per request.
var PREFIX_CHARS = 2048;

// The key that places a request's conversation on one instance (routing session or prefix), as a digest (the client's
// value is never logged or passed on), or '' when it names none: the X-Session-Id header, else the body's `user` (OpenAI's
// end-user id), else for prefix routing the start of the prompt - the chat's messages up to and including the first user
// message (the same at every turn of a conversation: later turns only append), or the completion prompt's first
// PREFIX_CHARS characters.
function conversationKey(r, body, mode) {
    var session = r.headersIn['X-Session-Id'];
    var source = '';
    if (typeof session === 'string' && session !== '') {
        source = 'session:' + session;
    } else if (typeof body.user === 'string' && body.user !== '') {
        source = 'user:' + body.user;
    } else if (mode === 'prefix') {
        var start = promptStart(body);
        source = start ? 'prefix:' + start : '';
    }
    return source ? crypto.createHash('sha256').update(source).digest('hex').substring(0, 16) : '';
}

function promptStart(body) {
    if (Array.isArray(body.messages)) {
        var head = [];
        for (var i = 0; i < body.messages.length; i++) {
            head.push(body.messages[i]);
            if (body.messages[i] && body.messages[i].role === 'user') {
                break;
            }
        }
        return head.length ? JSON.stringify(head).substring(0, PREFIX_CHARS) : '';
    }
    var prompt = Array.isArray(body.prompt) && typeof body.prompt[0] === 'string' ? body.prompt[0] : body.prompt;
    if (typeof prompt === 'string') {
        return prompt.substring(0, PREFIX_CHARS);
    }
    // token ids
    return Array.isArray(prompt) && prompt.length ? JSON.stringify(prompt.slice(0, PREFIX_CHARS / 4)) : '';
}

// the paths whose streams carry a usage event when stream_options.include_usage is set (vLLM's chat and completions)
var STREAM_USAGE_PATHS = ['/v1/chat/completions', '/v1/completions'];

// The body sent to the engine. A stream's tokens are counted from its last event, which vLLM sends only when the request
// sets stream_options.include_usage: the gateway asks for it where the client did not, and usage() takes that event out
// again. Without stream_options in the body, the option is put before the body's last brace (the client's bytes stay as
// they were: a JSON number above 2^53 would not survive JavaScript); with one, the body is written again with it,
// continuous_usage_stats off (with include_usage on, vLLM would add usage to every chunk the client gets).
function forwarded(r, body) {
    var text = r.requestText;
    if (body.stream !== true || STREAM_USAGE_PATHS.indexOf(r.uri) < 0) {
        return text;
    }
    var options = body.stream_options;
    if (options && typeof options === 'object' && options.include_usage === true) {
        return text;
    }
    r.variables.llmfleet_usage_strip = '1';
    if (options === undefined) {
        var end = text.lastIndexOf('}');
        var empty = /^\s*\{\s*$/.test(text.substring(0, end));
        return text.substring(0, end) + (empty ? '' : ',') + '"stream_options":{"include_usage":true}' + text.substring(end);
    }
    body.stream_options = Object.assign({}, (options && typeof options === 'object') ? options : {},
                                        {include_usage: true, continuous_usage_stats: false});
    return JSON.stringify(body);
}

// The answer's usage as JSON writes it (vLLM's is compact): the key, searched in the bytes; the object, read in a small
// window after the last key seen (vLLM may write more after it: prompt_logprobs).
var KEY = '"usage"';
var WINDOW = 256;
var EVENT_MAX = 4096;
var USAGE = /^"usage"\s*:\s*\{/;
var NO_CHOICES = /"choices"\s*:\s*\[\s*\]/;
// Per request (njs 0.7 runs each request in its own copy of this module; njs's QuickJS engine with context reuse, from
// 0.8.6, would not, and is not what Debian 12 ships): the window after the last key, the last bytes of the previous
// buffer (a key cut in two), and, in strip mode, the bytes of an event not ended yet.
var capture = null;
var edge = null;
var pending = null;

// js_body_filter of the engine's answer. Every buffer passes on as the bytes it is, except in strip mode, where the
// stream is passed on in whole events and vLLM's usage event (no choices, a usage) is left out. The last usage seen goes
// into $llmfleet_prompt_tokens and $llmfleet_completion_tokens for the access log; they stay '' where the answer has
// none (an error) or where its client went away before the usage passed. The usage is remembered as soon as its object
// is whole in the window, not at the answer's end: a client that stops reading at a stream's `data: [DONE]` (the
// official openai client closes the connection there) may be gone before the engine's last bytes, and the filter never
// sees them. A stream's events are counted into $llmfleet_events (the token budgets' estimate for an answer cut off
// before its usage).
var events = 0;
function usage(r, data, flags) {
    if (r.variables.llmfleet_stream === '1') {
        for (var at = data.indexOf('\n\n'); at >= 0; at = data.indexOf('\n\n', at + 2)) {
            events++;
        }
        r.variables.llmfleet_events = String(events);
    }
    look(data);
    var out = r.variables.llmfleet_usage_strip === '1' ? strip(data, flags.last) : data;
    if (capture) {
        remember(r, capture.toString());
    }
    r.sendBuffer(out, flags);
}

function look(data) {
    if (capture && capture.length < WINDOW) {
        capture = Buffer.concat([capture, data.slice(0, WINDOW - capture.length)]);
    }
    var at = data.lastIndexOf(KEY);
    if (at >= 0) {
        capture = data.slice(at, at + WINDOW);
    } else if (edge) {
        var joint = Buffer.concat([edge, data.slice(0, KEY.length)]);
        var cut = joint.lastIndexOf(KEY);
        if (cut >= 0 && cut < edge.length) {
            capture = Buffer.concat([joint.slice(cut), data.slice(KEY.length, KEY.length + WINDOW)]);
        }
    }
    edge = data.length >= KEY.length ? data.slice(data.length - KEY.length + 1) : data;
}

// strip mode: the whole events of pending + data without vLLM's usage event; an unfinished event waits for its end
function strip(data, last) {
    if (!pending && data.indexOf(KEY) < 0 && data.length >= 2 && data.lastIndexOf('\n\n') === data.length - 2) {
        return data;
    }
    var buf = pending ? Buffer.concat([pending, data]) : data;
    var parts = [];
    var start = 0;
    var end = buf.indexOf('\n\n', start);
    while (end >= 0) {
        var event = buf.slice(start, end + 2);
        if (!usageEvent(event)) {
            parts.push(event);
        }
        start = end + 2;
        end = buf.indexOf('\n\n', start);
    }
    pending = start < buf.length ? buf.slice(start) : null;
    if (last && pending) {
        parts.push(pending);
        pending = null;
    }
    return Buffer.concat(parts);
}

function usageEvent(event) {
    if (event.length > EVENT_MAX || event.indexOf(KEY) < 0) {
        return false;
    }
    var text = event.toString();
    return text.indexOf('data: {') === 0 && NO_CHOICES.test(text) && /"usage"\s*:\s*\{/.test(text);
}

// the usage object at the start of `text`, into the log's variables: each count once its digits have ended (a window
// cut inside a number waits for the next buffer)
function remember(r, text) {
    if (!USAGE.test(text)) {
        return;
    }
    var prompt = /"prompt_tokens"\s*:\s*(\d+)\s*[,}]/.exec(text);
    var completion = /"completion_tokens"\s*:\s*(\d+)\s*[,}]/.exec(text);
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
    // a key limited to some models lists only those
    var name = r.variables.llmfleet_key_name;
    r.headersOut['Content-Type'] = 'application/json';
    r.return(200, Object.prototype.hasOwnProperty.call(data.keyModels, name) ? data.keyModels[name] : data.models);
}

export default {keyName, route, models, usage};
